"""The pools: LocalPool and RayPool share one interface and return every result in order."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_workers import EvalRequest
from gpu_workers.workers.pool import LocalPool

TASK = (Path(__file__).resolve().parent / "hacks" / "tasks" / "scale_relu.py").read_text()
OPEN_KERNEL = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return EXPRESSION
'''


def _requests() -> list[EvalRequest]:
    right = OPEN_KERNEL.replace("EXPRESSION", "torch.relu(x * 1.5 + 0.25)")
    wrong = OPEN_KERNEL.replace("EXPRESSION", "x * 0.0")
    return [EvalRequest(task_source=TASK, kernel_source=k, device="cpu", track="open", baselines=("eager",),
                        timing_budget_s=0.1, trials=2) for k in (right, wrong, right)]


def test_local_pool_returns_each_verdict_in_request_order():
    with LocalPool(workers=2) as pool:
        statuses = [r.status for r in pool.map(_requests())]
    assert statuses == ["passed", "incorrect", "passed"]


def test_ray_pool_runs_several_evaluations_per_actor():
    pytest.importorskip("ray")
    import ray

    from gpu_workers.workers.pool import RayPool

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        with RayPool(actors=1, concurrency=3) as pool:
            assert pool.wait_ready(60)  # a CPU actor has no warm-up to wait for
            statuses = [r.status for r in pool.map(_requests())]
    finally:
        ray.shutdown()
    assert statuses == ["passed", "incorrect", "passed"]
    with pytest.raises(ValueError, match="concurrency"):
        RayPool(actors=1, concurrency=0)


def test_a_local_pool_judges_with_one_torch_thread_unless_told_otherwise():
    import subprocess
    import sys

    probe = ("import torch; torch.set_num_threads(2); from gpu_workers.workers.pool import LocalPool; "
             "LocalPool(workers=2).shutdown(); print(torch.get_num_threads())")
    for setting, expected in ((None, "1"), ("2", "2"), ("8", "2")):  # a cap, never a raise
        env = {k: v for k, v in os.environ.items() if k != "KERNELCOURT_JUDGE_THREADS"}
        if setting:
            env["KERNELCOURT_JUDGE_THREADS"] = setting
        out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected, (setting, out.stderr[-2000:])
