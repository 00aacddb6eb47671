"""Every honest reference kernel of our suite passes the real evaluator with no finding at all.

C++ kernels on the CPU here (slow: one build per task, cached under KERNELCOURT_CACHE_DIR); the
CUDA kernels in the gpu-marked test, on a GPU machine.
"""

from __future__ import annotations

import pytest
import torch

from gpu_workers import EvalRequest
from gpu_workers.suite import list_tasks
from gpu_workers.workers.pool import LocalPool

TASKS = list_tasks()


def _evaluate_all(device: str):
    requests = [
        EvalRequest(task_source=t.task_source,
                    kernel_source=t.cpu_kernel_source if device == "cpu" else t.cuda_kernel_source,
                    device=device, track="strict", task_name=t.name, baselines=("eager",), timing_budget_s=0.2)
        for t in TASKS
    ]
    # One at a time on the CPU: CPU timings share the host's two cores with whatever else runs. With a
    # second evaluation beside it, an eager baseline once came out at 1.8× its time at rest (1.23 vs
    # 0.68 ms), which put the honest scale_residual_add kernel (~6× faster than eager here) past the
    # 10× review line. On a GPU each timing has the device to itself.
    with LocalPool(workers=1 if device == "cpu" else 2) as pool:
        return dict(zip([t.name for t in TASKS], pool.map(requests)))


def _assert_clean(results):
    problems = {
        name: (r.status, r.message[:300], [(f.rule, f.severity) for f in r.findings])
        for name, r in results.items()
        if r.status != "passed" or r.findings or not r.correct or r.reward < 1
    }
    assert problems == {}


@pytest.mark.slow
def test_every_cpu_reference_kernel_passes_strict_with_no_findings():
    results = _evaluate_all("cpu")
    _assert_clean(results)
    assert all(r.timings_ms["kernel"] > 0 and r.timings_ms["eager"] > 0 for r in results.values())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_every_cuda_reference_kernel_passes_strict_with_no_findings():
    _assert_clean(_evaluate_all("cuda"))
