"""Faults at scale on a real GPU: an illegal memory access and a hung kernel in a mixed batch cost
their own evaluations only; the honest kernels queued around them pass.

Run on the GPU machine: ``pytest -m gpu tests/gpu_workers/test_evaluator_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch

from gpu_workers import EvalRequest
from gpu_workers.workers.pool import LocalPool

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 3.0


N = 1 << 22


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void triple_kernel(const float* x, float* y, int64_t n, int mode) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (mode == 1 && i == 0) { float* bad = (float*)(0x10); bad[i] = 1.0f; }      // illegal address
  if (mode == 2 && i == 0) { for (;;) __nanosleep(1000); }                       // never returns
  if (i < n) y[i] = x[i] * 3.0f;
}
torch::Tensor triple(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int64_t n = x.numel();
  triple_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, MODE);
  return y;
}
"""
ext = load_inline(name="ka_fault_MODE_TAG", cpp_sources="torch::Tensor triple(torch::Tensor x);", cuda_sources=CUDA,
                  functions=["triple"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.triple(x.contiguous())
'''


def _request(mode: int, tag: str) -> EvalRequest:
    return EvalRequest(task_source=TASK, kernel_source=KERNEL.replace("MODE", str(mode)).replace("TAG", tag),
                       device="cuda", baselines=("eager",), timing_budget_s=0.3, run_timeout_s=30)


def test_a_crashing_and_a_hanging_kernel_do_not_touch_their_neighbours():
    batch = [_request(0, "a"), _request(1, "a"), _request(0, "b"), _request(2, "a"), _request(0, "c")]
    with LocalPool(workers=4) as pool:
        results = list(pool.map(batch))
    statuses = [r.status for r in results]
    assert statuses == ["passed", "runtime_error", "passed", "timeout", "passed"], "\n".join(
        f"{r.status}: {r.message[:300]} | {r.run_log[-300:]!r} | {(r.timing_stats.get('timeline') or [])[-14:]}"
        for r in results)
    assert "illegal" in (results[1].message + results[1].run_log).lower()
    # and no honest neighbour timed beside the hung kernel: each timing saw the GPU drain first
    # (a timing that found it busy let the GPU go until the hung kernel's own bound ended it)
    for honest in (results[0], results[2], results[4]):
        drain = honest.timing_stats["kernel"]["drain"]
        assert drain["idle"] is True, drain
