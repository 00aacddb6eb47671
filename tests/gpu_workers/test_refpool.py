"""Reference children kept between evaluations (refpool): reused only after a clean run, each
evaluation's log its own, and off with KERNELCOURT_REFERENCE_REUSE=0."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_workers import EvalRequest, evaluate
from gpu_workers.child import reference as child_reference
from gpu_workers.sandbox import process as sandbox
from gpu_workers.sandbox import refpool

TASKS = Path(__file__).resolve().parent / "hacks" / "tasks"
KERNEL = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x * 1.5 + 0.25)
"""
TANH_KERNEL = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.tanh(x) * 1e-4
"""


def _request(task: str, kernel: str) -> EvalRequest:
    return EvalRequest(task_source=task, kernel_source=kernel, device="cpu", track="open", baselines=("eager",),
                       timing_budget_s=0.1, trials=3, run_timeout_s=60.0)


def _reference_start(result) -> str:
    return next(label for label, _ in result.timing_stats["timeline"] if label.startswith("reference: "))


@pytest.fixture(autouse=True)
def no_idle_references():
    refpool.close_all()
    yield
    refpool.close_all()


def test_a_reference_child_serves_the_next_evaluation_of_another_task(kernelcourt_cache_dir):
    first = evaluate(_request((TASKS / "scale_relu.py").read_text(), KERNEL))
    assert first.status == "passed", first.message
    assert _reference_start(first) == "reference: started"
    kept = refpool.idle_pids()
    assert len(kept) == 1

    second = evaluate(_request((TASKS / "tiny_tanh.py").read_text(), TANH_KERNEL))
    assert second.status == "passed", second.message  # its own task's outputs, not the first one's
    assert _reference_start(second) == "reference: reused"
    assert refpool.idle_pids() == kept  # the same process, back for a third


def test_a_failed_reference_is_closed_and_shows_only_its_own_log(kernelcourt_cache_dir):
    noisy = (TASKS / "scale_relu.py").read_text().replace("def get_inputs():", "print('FIRST-EVALUATION-MARK')\n\n\ndef get_inputs():")
    first = evaluate(_request(noisy, KERNEL))
    assert first.status == "passed", first.message
    (kept,) = refpool.idle_pids()

    broken = (TASKS / "scale_relu.py").read_text().replace(
        "def get_inputs():", "def get_inputs():\n    print('SECOND-EVALUATION-MARK')\n    raise ValueError('no inputs today')\n\n\ndef _unused():")
    second = evaluate(_request(broken, KERNEL))
    assert second.status == "runtime_error" and "no inputs today" in second.message + second.run_log
    assert _reference_start(second) == "reference: reused"
    assert "SECOND-EVALUATION-MARK" in second.run_log and "FIRST-EVALUATION-MARK" not in second.run_log
    assert kept not in refpool.idle_pids()  # a reference that failed is never lent again

    third = evaluate(_request((TASKS / "scale_relu.py").read_text(), KERNEL))
    assert third.status == "passed" and _reference_start(third) == "reference: started"


def test_reuse_can_be_switched_off(kernelcourt_cache_dir, monkeypatch):
    monkeypatch.setenv("KERNELCOURT_REFERENCE_REUSE", "0")
    for _ in range(2):
        result = evaluate(_request((TASKS / "scale_relu.py").read_text(), KERNEL))
        assert result.status == "passed", result.message
        assert _reference_start(result) == "reference: started"
    assert refpool.idle_pids() == set()


def test_a_reference_child_started_ahead_does_torchs_lazy_imports_then_and_a_candidate_does_not():
    for role, expected in (("reference", {"phase": "warm", "lazy": sorted(child_reference.LAZY_MODULES)}),
                           ("candidate", {"phase": "warm"})):
        with sandbox.spawn(role) as child:
            child.send({"warm": "cpu"})  # as refpool.prestart sends it (and the evaluator, to a candidate)
            assert child.recv(time.monotonic() + 120) == expected
