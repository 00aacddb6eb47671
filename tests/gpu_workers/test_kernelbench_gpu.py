"""KernelBench as published on the GPU: identity candidates measure 1.00 against eager, agree with
the plain KernelBench-style timing, and repeat (issue 20's bars). Runs on the GPU machine only."""

from __future__ import annotations

import pytest
import torch

from gpu_workers import EvalRequest
from gpu_workers.suite.kernelbench import identity_candidate, task_files
from gpu_workers.workers.pool import LocalPool

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TASKS = ["level1/19_ReLU", "level1/23_Softmax", "level2/12_Gemm_Multiply_LeakyReLU", "level3/9_ResNet18",
         "level3/42_GRUBidirectionalHidden"]


@pytest.fixture(scope="module")
def runs(kernelcourt_cache_dir, kernelbench_root):
    tasks = task_files(kernelbench_root, tasks=TASKS)
    requests = [EvalRequest(task_source=t.path.read_text(), kernel_source=identity_candidate(t.path.read_text()),
                            device="cuda", track="open", task_name=t.key, baselines=("eager",))
                for _ in range(3) for t in tasks]
    with LocalPool(workers=4, gpus=1) as pool:
        results = list(pool.map(requests))
    return tasks, results


def test_identity_candidates_pass_and_measure_one(runs):
    tasks, results = runs
    off = {}
    for index, result in enumerate(results):
        key = tasks[index % len(tasks)].key
        assert result.status == "passed", f"{key}: {result.message}"
        off.setdefault(key, []).append(round(abs(result.speedup["eager"] - 1.0), 3))
    assert {k: max(v) <= 0.03 for k, v in off.items()} == {t.key: True for t in tasks}, off


def test_three_runs_of_a_task_agree_within_five_percent(runs):
    tasks, results = runs
    by_task: dict[str, list[float]] = {}
    for index, result in enumerate(results):
        by_task.setdefault(tasks[index % len(tasks)].key, []).append(result.speedup["eager"])
    ratios = {k: round(max(v) / min(v), 3) for k, v in by_task.items()}
    assert {k: r <= 1.05 for k, r in ratios.items()} == {t.key: True for t in tasks}, ratios


def test_the_plain_method_agrees_with_the_evaluator(runs, bench_module):
    tasks, results = runs
    plain = bench_module("plain_timing")
    for task, result in zip(tasks, results):
        source = task.path.read_text()
        measured = plain.plain_speedup(source, identity_candidate(source), "cuda")
        assert abs(result.speedup["eager"] / measured["speedup"] - 1.0) <= 0.05, (task.key, measured)
