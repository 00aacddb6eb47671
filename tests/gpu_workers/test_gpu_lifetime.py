"""On a real GPU: a kernel that never returns holds the GPU (shared) for its stretch's bound only;
an honest neighbour's timings wait for that, not for the hanging one's run limit.

Run on the GPU machine: ``pytest -m gpu tests/gpu_workers/test_gpu_lifetime.py``.
"""

from __future__ import annotations

import tempfile
import time

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


def get_inputs():
    return [torch.randn(1 << 22)]


def get_init_inputs():
    return []
'''

# HANG=1: the first call marks its folder, then launches a kernel that never ends.
KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void triple_kernel(const float* x, float* y, int64_t n, int hang) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (hang && i == 0) { for (;;) __nanosleep(1000); }
  if (i < n) y[i] = x[i] * 3.0f;
}
torch::Tensor triple(torch::Tensor x, int64_t hang) {
  auto y = torch::empty_like(x);
  int64_t n = x.numel();
  triple_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n, (int)hang);
  return y;
}
"""
ext = load_inline(name="kc_lifetime_HANG", cpp_sources="torch::Tensor triple(torch::Tensor x, int64_t hang);",
                  cuda_sources=CUDA, functions=["triple"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        if HANG:
            open("spinning", "w").close()
        return ext.triple(x.contiguous(), HANG)
'''


def _request(hang: int) -> EvalRequest:
    return EvalRequest(task_source=TASK, kernel_source=KERNEL.replace("HANG", str(hang)), device="cuda",
                       baselines=("eager",), timing_budget_s=0.3, run_timeout_s=240)


def test_a_hanging_kernel_is_killed_at_its_bound_and_its_neighbour_passes(tmp_path, monkeypatch):
    # given two workers on one GPU, a stretch floor well below the run's limit, the folders visible
    monkeypatch.setenv("KERNELCOURT_GPU_HOLD_FLOOR_S", "15")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    hanging_request = _request(1)
    with LocalPool(workers=2, gpus=1) as pool:
        # when a hung kernel holds the GPU in its warm-up call and an honest neighbour arrives
        hanging = pool.submit(hanging_request)
        deadline = time.monotonic() + 600
        while not list(tmp_path.glob("kc-candidate-*/spinning")):
            assert time.monotonic() < deadline and not hanging.done(), "the kernel never started"
            time.sleep(0.05)
        honest = pool.submit(_request(0)).result()
        hung = hanging.result()

    # then the hung one is killed at its warm-up stretch's bound, the GPU given back
    assert hung.status == "timeout", hung.message
    overrun = hung.timing_stats["gpu_slot"]["overrun"]
    assert (overrun["after"], overrun["ends"]) == ("built", "ready")
    assert overrun["bound_s"] < hanging_request.run_timeout_s
    # and the neighbour passed, its timings having waited less than the hung one's run limit
    assert honest.status == "passed", (honest.message, honest.run_log[-1500:])
    assert honest.timing_stats["gpu_slot"]["exclusive_wait_s"] < hanging_request.run_timeout_s
