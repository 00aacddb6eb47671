"""The pools: LocalPool and RayPool share one interface and return every result in order."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from gpu_workers import EvalRequest
from gpu_workers.schema import EvalResult, is_infrastructure
from gpu_workers.workers.pool import LocalPool

TASK = (Path(__file__).resolve().parents[1] / "hacks" / "tasks" / "scale_relu.py").read_text()
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


@pytest.mark.parametrize("processes", [1, 2])
def test_local_pool_returns_each_verdict_in_request_order(processes, caplog):
    caplog.set_level(logging.DEBUG, logger="gpu_workers.progress")
    with LocalPool(workers=2, processes=processes, warm="cpu") as pool:
        assert pool.wait_ready(300)  # warmed up as a worker is when it starts, in each worker process
        assert all(isinstance(steps, dict) and "compile_child" in steps for steps in pool.warm_ups)
        assert len(pool.warm_ups) == (processes if processes > 1 else 0)
        statuses = [r.status for r in pool.map(_requests())]
    assert statuses == ["passed", "incorrect", "passed"]
    # each evaluation's live progress reaches this process's loggers, wherever it ran
    marks = [r.getMessage() for r in caplog.records if r.name == "gpu_workers.progress"]
    assert sum(m.endswith("judge: done") for m in marks) == 3


def _fake_evaluate(request: EvalRequest) -> EvalResult:
    """Evaluations in name only: "die" ends its worker process, "raise" raises, "wait:<path>" waits
    until the file exists; each other answers its own name and process."""
    name = request.task_name
    if name == "die":
        os._exit(3)
    if name == "raise":
        raise KeyError("no such thing")
    if name.startswith("wait:"):
        while not Path(name[5:]).exists():
            time.sleep(0.01)
    return EvalResult(status="passed", message=f"{name} {os.getpid()}")


def _named(*names: str) -> list[EvalRequest]:
    return [EvalRequest(task_source="", kernel_source="", device="cpu", task_name=n) for n in names]


def test_a_worker_process_that_dies_fails_only_its_own_evaluations_as_infrastructure(tmp_path):
    gate = tmp_path / "go"
    with LocalPool(workers=2, processes=2, evaluate_fn=_fake_evaluate) as pool:
        # one worker process holds the waiting evaluation; the other takes "die" and ends
        waiting = pool.submit(_named(f"wait:{gate}")[0])
        died = pool.submit(_named("die")[0]).result(timeout=60)
        gate.touch()
        survived = waiting.result(timeout=60)
        after = [f.result(timeout=60) for f in [pool.submit(r) for r in _named("a", "b", "c")]]
        with pytest.raises(RuntimeError, match="KeyError"):
            pool.submit(_named("raise")[0]).result(timeout=60)
    assert died.status == "runtime_error" and is_infrastructure(died.message)
    assert "exit code 3" in died.message
    assert survived.status == "passed" and survived.message.startswith("wait:")
    # its place was taken: later evaluations run, in two processes again
    assert [r.status for r in after] == ["passed"] * 3
    assert os.getpid() not in {int(r.message.split()[-1]) for r in after}


def test_worker_processes_need_a_function_they_can_import():
    with pytest.raises(ValueError, match="module-level function"):
        LocalPool(workers=2, processes=2, evaluate_fn=lambda request: EvalResult(status="passed"))
    with pytest.raises(ValueError, match="processes"):
        LocalPool(workers=2, processes=3)


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
