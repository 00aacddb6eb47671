"""A host-bound candidate timed in alternation with its eager baseline (``pipeline/pairing.py``):
the reference child times the baseline again between the candidate's rounds, the speedup is set
against that timing, and the rounds' waits are no part of either side's timing."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
import torch

from gpu_workers import EvalRequest, evaluate
from gpu_workers.child import timing
from gpu_workers.pipeline import plan
from gpu_workers.pipeline.verdict import with_paired
from gpu_workers.settings import current

TASK = Path(__file__).resolve().parent / "hacks" / "tasks" / "scale_relu.py"
KERNEL = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x * 1.5 + 0.25)
"""


def _request() -> EvalRequest:
    return EvalRequest(task_source=TASK.read_text(), kernel_source=KERNEL, device="cpu", track="open",
                       baselines=("eager",), timing_budget_s=0.5, trials=3, run_timeout_s=60.0)


@pytest.fixture(scope="module")
def paired_result(kernelcourt_cache_dir):
    return evaluate(_request(), settings=dataclasses.replace(current(), pair_host_timed=True))


def test_the_candidate_and_its_eager_baseline_take_turns_and_the_speedup_is_set_against_that_timing(paired_result):
    result = paired_result
    assert result.status == "passed", result.message
    eager, kernel = result.timing_stats["eager"], result.timing_stats["kernel"]
    # then the reference timed the baseline again, in rounds, beside the candidate's own rounds
    assert eager["paired"]["rounds"] >= 2 and eager["paired"]["every"] == plan.PAIR_EVERY["cpu"]
    assert kernel["rounds"] >= 2 and abs(kernel["rounds"] - eager["paired"]["rounds"]) <= 1
    # each round ended after that many timed iterations of its side, and both sides timed the same
    # whole rounds: none of either's without the other's to match it
    assert kernel["iterations"] >= plan.PAIR_EVERY["cpu"] * kernel["rounds"]
    assert kernel["iterations"] == eager["iterations"] and kernel["iterations"] % plan.PAIR_EVERY["cpu"] == 0
    labels = [label for label, _ in result.timing_stats["timeline"]]
    assert labels.index("candidate: timing_begin") < labels.index("pairing: begin") \
        < labels.index("reference: paired") < labels.index("candidate: timing_end")
    assert labels.count("candidate: round") == kernel["rounds"]
    # the speedup is that timing's, and its interval the two timings' own (they met the same host)
    assert result.timings_ms["eager"] == pytest.approx(eager["median_ms"])
    assert result.speedup["eager"] == pytest.approx(eager["median_ms"] / result.timings_ms["kernel"])
    lo, hi = result.timing_stats["speedup_interval"]["eager"]
    assert lo == pytest.approx(eager["spread_ms"]["ci95"][0] / kernel["spread_ms"]["ci95"][1])
    assert hi == pytest.approx(eager["spread_ms"]["ci95"][1] / kernel["spread_ms"]["ci95"][0])
    # and no timer check held the other side's rounds against the candidate
    assert not [f for f in result.findings if f.rule == "timer_mismatch"], result.findings


def test_switched_off_the_candidate_is_timed_alone_against_the_kept_baseline(kernelcourt_cache_dir):
    result = evaluate(_request(), settings=dataclasses.replace(current(), pair_host_timed=False))
    assert result.status == "passed", result.message
    assert not result.timing_stats["eager"].get("paired")
    assert not result.timing_stats["kernel"].get("rounds")
    assert "pairing: begin" not in [label for label, _ in result.timing_stats["timeline"]]


def test_a_timing_in_rounds_waits_between_them_and_leaves_the_waits_out():
    model = torch.nn.ReLU()
    rotations = [[torch.randn(256)] for _ in range(12)]
    buffers = [rotations[0][0].clone()]
    rounds: list[int] = []

    def on_round() -> bool:  # the other side times meanwhile
        rounds.append(1)
        time.sleep(0.05)
        return len(rounds) < 2

    began = time.monotonic()
    stats = timing.time_callable(model, buffers, rotations, torch.device("cpu"), budget_s=30.0, max_iters=12,
                                 keep=(), target_spread=0.0, settle_within=0.0, on_round=on_round, round_every=4)
    outer_ms = (time.monotonic() - began) * 1e3
    # then it stopped at the second round's word, after 8 timed iterations
    assert stats["rounds"] == 2 and stats["iterations"] == 8
    assert stats["paused_ms"] >= 100.0  # two waits of at least 50 ms each
    # and its own clock over the timing leaves the waits out (the two together fit inside the call)
    assert stats["span_ms"] + stats["paused_ms"] <= outer_ms


def test_a_side_of_a_pair_stops_only_where_a_round_ends_and_in_place_of_its_word():
    model = torch.nn.ReLU()
    rotations = [[torch.randn(256)] for _ in range(12)]
    words: list[int] = []

    def on_round() -> bool:
        words.append(1)
        return True

    def timed(**rounds) -> dict:
        return timing.time_callable(model, [rotations[0][0].clone()], rotations, torch.device("cpu"), budget_s=0.0,
                                    max_iters=24, keep=(), target_spread=0.0, settle_within=0.0, **rounds)

    # alone, its budget spent, it stops once every input set was timed; in rounds of 5, at the end
    # of the round that reaches them, without that round's word (the other side is told it stopped)
    assert timed()["iterations"] == 12
    paired = timed(on_round=on_round, round_every=5)
    assert paired["iterations"] == 15 and paired["rounds"] == len(words) == 2


@pytest.mark.parametrize(("device", "stays", "timed", "enabled", "every"), [
    ("cuda", True, "host", True, plan.PAIR_EVERY["cuda"]),
    ("cuda", True, "kernel side", True, 0),  # the GPU's time: steady from process to process
    ("cuda", False, "host", True, 0),  # no reference child beside the candidate
    ("cuda", True, "host", False, 0),
    ("cpu", True, None, True, plan.PAIR_EVERY["cpu"]),
])
def test_which_timings_are_paired(device, stays, timed, enabled, every):
    baselines = {"eager": {"stats": {"timed": timed}}}
    assert plan.pair_every(device, stays, baselines, enabled) == every


def test_a_failed_pairing_leaves_the_kept_baseline_standing():
    kept = {"stats": {"median_ms": 2.0}, "samples_ms": [2.0, 2.1]}
    assert with_paired({"baselines": {"eager": kept}, "paired": {"entry": None, "error": "it failed"}})["eager"] is kept
    kept["overhead_ms_per_iter"] = 0.3
    timed = {"stats": {"median_ms": 1.5}, "paired": {}, "overhead_ms_per_iter": 0.2, "span": {"source": "thread"}}
    paired = with_paired({"baselines": {"eager": kept}, "paired": {"entry": timed}})
    assert paired["eager"]["stats"]["median_ms"] == 1.5 and paired["eager"]["samples_ms"] == [2.0, 2.1]
    assert paired["eager"]["overhead_ms_per_iter"] == 0.2
    # where the kernel's account of the reference's thread did not stand, the pairing made no loop cost
    timed.update(span={"source": "parent"}, overhead_ms_per_iter=None)
    assert with_paired({"baselines": {"eager": kept}, "paired": {"entry": timed}})["eager"]["overhead_ms_per_iter"] == 0.3


SPINNER = """
import threading
import torch
import torch.nn as nn


def _spin():
    while True:
        sum(i * i for i in range(1000))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._thread = None

    def forward(self, x):
        if self._thread is None:  # a thread of its own that would take the CPU while its baseline times
            self._thread = threading.Thread(target=_spin, daemon=True)
            self._thread.start()
        return torch.relu(x * 1.5 + 0.25)
"""


def test_nothing_of_the_candidate_runs_while_its_baseline_times_a_round(kernelcourt_cache_dir):
    request = dataclasses.replace(_request(), kernel_source=SPINNER)
    result = evaluate(request, settings=dataclasses.replace(current(), pair_host_timed=True))
    paired = result.timing_stats["eager"]["paired"]
    # given a candidate whose own thread spins on the CPU from its first call on, then its process was
    # stopped while the reference timed each of its rounds: the spinner ran for none of them
    assert paired["rounds"] >= 2
    assert paired["candidate_cpu_ms"] < 2.0, paired


def test_past_its_allowed_waits_the_parents_clock_stands_less_the_time_it_held_its_word_back():
    import os
    import types

    from gpu_workers.pipeline.accounting import TimedSpan

    me = types.SimpleNamespace(proc=types.SimpleNamespace(pid=os.getpid()))  # this thread, as a child's
    began = time.monotonic()
    span = TimedSpan(me)
    for _ in range(6):  # more waits than the span allows: its own account of the thread does not stand
        time.sleep(0.05)
    wall, _ = span.end(paused_ms=200.0)
    outer_ms = (time.monotonic() - began) * 1e3
    # then the parent's clock stands, without the 200 ms it held its word back: at least the 300 ms
    # slept less those, at most what passed less those
    assert span.detail["source"] == "parent"
    assert 100.0 <= wall <= outer_ms - 200.0, span.detail
