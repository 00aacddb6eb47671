"""Where an evaluation's children stop for their parent: the pause points that let the GPU go for
CPU work alone (the reference's construction, the candidate's kept outputs in transit) are reached
in protocol order, and an evaluation through them passes."""

from __future__ import annotations

from pathlib import Path

from gpu_workers import EvalRequest, evaluate

TASK = Path(__file__).resolve().parent / "hacks" / "tasks" / "scale_relu.py"
KERNEL = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x * 1.5 + 0.25)
"""


def test_the_reference_builds_before_its_models_move_and_the_kept_outputs_travel_after_their_copy(
        kernelcourt_cache_dir):
    # given an honest candidate evaluated on the CPU
    result = evaluate(EvalRequest(task_source=TASK.read_text(), kernel_source=KERNEL, device="cpu", track="open",
                                  baselines=("eager",), timing_budget_s=0.1, trials=3, run_timeout_s=60.0))
    assert result.status == "passed", result.message
    labels = [label for label, _ in result.timing_stats["timeline"]]

    def at(label: str) -> int:
        assert label in labels, labels
        return labels.index(label)

    # then the reference paused once built (where, on CUDA, the GPU is first taken) before its models
    # were placed, and the candidate's kept outputs were copied to its host before their message
    assert at("reference: constructed") < at("reference: models") < at("reference: trial")
    assert at("candidate: timing_end") < at("candidate: timing_read") < at("candidate: timing_outputs") \
        < at("candidate: after")
    # and the slot's stretches name the step that ended each (the copy's own among them)
    assert "candidate: timing_read" in result.timing_stats["gpu_slot"]["stretches"]
