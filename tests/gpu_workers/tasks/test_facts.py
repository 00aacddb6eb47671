"""Kept baseline timings: several samples from separate evaluations, their lower median used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_workers import EvalRequest, evaluate
from gpu_workers.tasks import facts as taskfacts

TASKS = Path(__file__).resolve().parents[1] / "hacks" / "tasks"
KERNEL = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x * 1.5 + 0.25)
"""


def _timing(median_ms: float) -> dict:
    return {"stats": {"median_ms": median_ms, "iterations": 10, "total_ms": 10 * median_ms}, "wall_ms": 20 * median_ms,
            "overhead_ms_per_iter": 0.01}


@pytest.fixture
def fact(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KERNELCOURT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELCOURT_BASELINE_SAMPLES", "3")
    return taskfacts.fact_path(["task", "", "cpu:host", "1", "0.2"], "eager")


def test_a_slow_sample_never_stands_for_the_baseline_once_a_faster_one_is_kept(fact):
    assert taskfacts.load_baseline(fact) == (None, False)
    slow = taskfacts.keep_baseline(fact, _timing(0.70))  # timed while the host was busy
    assert slow["stats"]["median_ms"] == 0.70
    assert taskfacts.load_baseline(fact)[1] is False  # one sample: the next evaluation times it again
    best = taskfacts.keep_baseline(fact, _timing(0.13))
    assert best["stats"]["median_ms"] == 0.13 and best["samples_ms"] == [0.13, 0.70]
    taskfacts.keep_baseline(fact, _timing(0.14))
    kept, settled = taskfacts.load_baseline(fact)
    # the lower median: neither the busy sample nor the luckiest one stands for the three
    assert settled and kept["stats"]["median_ms"] == 0.14 and kept["overhead_ms_per_iter"] == 0.01
    assert kept["samples_ms"] == [0.13, 0.14, 0.70]
    assert kept["samples_spread"]["samples"] == 3 and kept["samples_spread"]["ci95"] == [0.13, 0.70]
    # a late fourth sample (two evaluations raced) keeps only the fastest three
    taskfacts.keep_baseline(fact, _timing(0.12))
    late = taskfacts.load_baseline(fact)[0]
    assert late["samples_ms"] == [0.12, 0.13, 0.14] and late["stats"]["median_ms"] == 0.13


def test_kept_facts_survive_broken_files_and_differ_by_what_they_depend_on(fact):
    fact.write_text("{not json")
    assert taskfacts.load_baseline(fact) == (None, False)
    fact.write_text(json.dumps(_timing(0.2)))  # a single timing, as one sample
    assert taskfacts.load_baseline(fact)[0]["samples_ms"] == [0.2]
    fact.write_text(json.dumps({"samples": [{"stats": {"median_ms": "x"}}, _timing(0.3)]}))
    assert taskfacts.load_baseline(fact)[0]["samples_ms"] == [0.3]  # the unreadable sample is dropped
    other = taskfacts.fact_path(["task", "", "cpu:host", "2", "0.2"], "eager")  # other thread count
    assert other != fact and taskfacts.load_baseline(other) == (None, False)
    flops = taskfacts.fact_path(["task", "", "cpu:host", "1", "0.2"], "flops")
    assert taskfacts.load_flops(flops) is None
    taskfacts.keep_flops(flops, 1234)
    assert taskfacts.load_flops(flops) == 1234
    assert not [p for p in fact.parent.iterdir() if p.name.startswith(".tmp-")]  # no half-written files


def test_the_first_evaluations_of_a_task_each_time_its_baseline_and_later_ones_use_the_kept_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELCOURT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELCOURT_BASELINE_SAMPLES", "2")
    request = EvalRequest(task_source=(TASKS / "scale_relu.py").read_text(), kernel_source=KERNEL, device="cpu",
                          track="open", baselines=("eager",), timing_budget_s=0.1, trials=2, run_timeout_s=60.0)
    timed = []
    for _ in range(3):
        result = evaluate(request)
        assert result.status == "passed", result.message
        timed.append(any(label == "reference: timing_end eager" for label, _ in result.timing_stats["timeline"]))
    assert timed == [True, True, False]
    samples = result.timing_stats["eager"]["samples_ms"]
    assert len(samples) == 2 and result.timings_ms["eager"] == min(samples)  # the lower median of two
