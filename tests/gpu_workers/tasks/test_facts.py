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


def test_a_kept_paired_timing_is_a_sample_like_any_other_for_later_evaluations(fact):
    # timed in alternation with one evaluation's kernel (pipeline/pairing.py): that says how that
    # evaluation set its speedup, not how a later one, timed alone, meets the host
    taskfacts.keep_baseline(fact, {**_timing(0.10), "paired": {"rounds": 5}, "overhead_ms_per_iter": None})
    kept = taskfacts.load_baseline(fact)[0]
    assert kept["stats"]["median_ms"] == 0.10 and "paired" not in kept
    # and a paired timing without a loop cost of its own takes none from the others' median
    taskfacts.keep_baseline(fact, _timing(0.12))
    taskfacts.keep_baseline(fact, _timing(0.14))
    assert taskfacts.load_baseline(fact)[0]["overhead_ms_per_iter"] == 0.01


def _keep_many(fact: Path, start, first: int, count: int) -> None:
    start.wait()
    for value in range(first, first + count):
        taskfacts.keep_baseline(fact, _timing(1.0 + value / 1000))


def test_samples_kept_at_once_by_several_evaluations_are_all_kept(fact, monkeypatch):
    # a batch of one task's candidates times its baseline in several processes at once
    import multiprocessing

    from gpu_workers import settings

    monkeypatch.setenv("KERNELCOURT_BASELINE_SAMPLES", "200")
    settings.current.cache_clear()
    context = multiprocessing.get_context("fork")
    start = context.Barrier(4)
    workers = [context.Process(target=_keep_many, args=(fact, start, 40 * n, 40)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0, 0]
    assert len(taskfacts.load_baseline(fact)[0]["samples_ms"]) == 160


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
    # timed alone: a timing in alternation with the baseline is one more sample of it (test_pairing.py)
    monkeypatch.setenv("KERNELCOURT_PAIR_HOST_TIMED", "0")
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


def _task_fact(task: str) -> Path:
    return taskfacts.fact_path([task, "", "cpu:host", "1", "0.2"], "eager")


def test_a_machines_run_to_run_spread_stands_once_three_tasks_show_theirs(fact):
    spread = taskfacts.fact_path(["cpu:host", "1"], "run_to_run")
    for task, medians in (("a", (1.0, 1.1, 1.3)), ("b", (2.0, 2.0, 2.2))):
        for value in medians:
            taskfacts.keep_baseline(_task_fact(task), _timing(value), spread)
    assert taskfacts.load_run_to_run(spread) == {}  # two tasks: one task's behaviour is not the machine's
    taskfacts.keep_baseline(_task_fact("c"), _timing(0.9), spread)
    taskfacts.keep_baseline(_task_fact("c"), _timing(1.0), spread)
    assert taskfacts.load_run_to_run(spread) == {}  # c has two samples: no spread of its own yet
    taskfacts.keep_baseline(_task_fact("c"), _timing(1.2), spread)
    # each task's kept samples against their middle: a 1.0/1.1/1.3, b 1.0/1.0/1.1, c 0.9/1.0/1.2
    fast, slow = taskfacts.load_run_to_run(spread)[""]
    assert fast == pytest.approx(1.0 / 1.1) and slow == pytest.approx(1.3 / 1.1)
    # kinds of timing apart (a host-bound timing's spread is not a kernel-side one's)
    for value in (1.0, 1.5, 2.0):
        host = _timing(value)
        host["stats"]["timed"] = "host"
        taskfacts.keep_baseline(_task_fact("d"), host, spread)
    assert set(json.loads(spread.read_text())) == {"", "host"}  # noted apart ...
    assert set(taskfacts.load_run_to_run(spread)) == {""}  # ... and one host task is not the machine's


def test_tasks_noted_from_many_threads_at_once_are_all_kept(fact):
    import threading

    spread = taskfacts.fact_path(["cpu:host", "1"], "run_to_run")
    barrier = threading.Barrier(8)

    def keep(task: str) -> None:
        barrier.wait()
        for value in (1.0, 1.2, 1.5):
            taskfacts.keep_baseline(_task_fact(task), _timing(value), spread)

    threads = [threading.Thread(target=keep, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(json.loads(spread.read_text())[""]) == 8


def test_an_evaluation_whose_baseline_is_new_holds_the_machines_spread(tmp_path, monkeypatch):
    from gpu_workers.hardware import hardware_info
    from gpu_workers.pipeline.reference import spread_path

    monkeypatch.setenv("KERNELCOURT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELCOURT_PAIR_HOST_TIMED", "0")  # set against the kept baseline, not one timed beside it
    request = EvalRequest(task_source=(TASKS / "scale_relu.py").read_text(), kernel_source=KERNEL, device="cpu",
                          track="open", baselines=("eager",), timing_budget_s=0.1, trials=2, run_timeout_s=60.0)
    spread = spread_path(request, hardware_info("cpu"))
    for task in ("a", "b", "c"):  # three other tasks of this machine, each kept from three evaluations
        for value in (0.8, 1.0, 1.25):
            taskfacts.keep_baseline(taskfacts.fact_path([task], "eager"), _timing(value), spread)
    result = evaluate(request)
    assert result.status == "passed", result.message
    assert result.timing_stats["run_to_run"] == {"": [0.8, 1.25]}
    low, high = result.timing_stats["speedup_interval"]["eager"]
    kernel = result.timing_stats["kernel"]["spread_ms"]["ci95"]
    eager = result.timing_stats["eager"]["spread_ms"]["ci95"]
    # both sides are one draw of that spread: the interval's ends are their own crossed, widened both ways
    assert low == pytest.approx(eager[0] / 1.25 / (kernel[1] / 0.8))
    assert high == pytest.approx(eager[1] / 0.8 / (kernel[0] / 1.25))
