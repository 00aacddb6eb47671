"""bench/kernelbench_sweep.py on the CPU: two small tasks scaled down, rows as JSONL, resumable, a summary; and
bench/host_overhead.py's stages."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_workers.suite.kernelbench import baseline_times, identity_candidate, task_files

REPO = Path(__file__).resolve().parents[2]


def test_task_files_by_level_and_filter(kernelbench):
    every = task_files(kernelbench)
    assert len(every) == 250
    assert [t.key for t in every[:2]] == ["level1/1_Square_matrix_multiplication_", "level1/2_Standard_matrix_multiplication_"]
    assert {t.level for t in every} == {1, 2, 3}
    picked = task_files(kernelbench, tasks=["level1/19_ReLU", "2/1", "9_ResNet18"])
    assert [t.key for t in picked] == ["level1/19_ReLU", "level2/1_Conv2D_ReLU_BiasAdd", "level3/9_ResNet18"]
    assert [t.key for t in task_files(kernelbench, levels=[3])][:1] == ["level3/1_MLP"]


def test_identity_candidate_renames_the_model_only():
    source = "class Model(nn.Module):\n    def __init__(self):\n        super(Model, self).__init__()\nx = ModelA\n"
    assert identity_candidate(source) == ("class ModelNew(nn.Module):\n    def __init__(self):\n"
                                          "        super(ModelNew, self).__init__()\nx = ModelA\n")


def test_published_baselines_by_task(kernelbench):
    times = baseline_times(kernelbench)
    assert times["level1/1_Square_matrix_multiplication_"]["mean"] == 2.66
    assert times["level1/1_Square_matrix_multiplication_"]["folder"] == "H100_Modal"


@pytest.mark.slow
def test_sweep_smoke_on_the_cpu_resumes_and_summarizes(tmp_path, capsys, kernelbench, bench_module):
    sweep = bench_module("kernelbench_sweep")
    out = tmp_path / "sweep.jsonl"
    args = ["--root", str(kernelbench), "--device", "cpu", "--max-elements", "4096", "--tasks", "level1/19_ReLU", "level1/23_Softmax",
            "--workers", "2", "--timing-budget", "0.05", "--trials", "2", "--out", str(out)]
    # when two tasks are swept, then swept again
    assert sweep.main(args) == 0
    first = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sweep.main(args) == 0
    again = capsys.readouterr().out
    # then each has one row, passed, with its spread, phases and bytes; the second sweep evaluated nothing
    assert sorted(r["task"] for r in rows) == ["level1/19_ReLU", "level1/23_Softmax"]
    assert [r["status"] for r in rows] == ["passed", "passed"]
    for r in rows:
        assert r["spread"]["kernel"]["samples"] == r["iterations"]
        assert r["spread"]["eager"]["samples"] >= 1
        assert max(r["bytes"]["largest"].values()) <= 4096
        assert set(r["phases_s"]) == {"compile", "reference", "candidate", "judge"}
        # on the CPU every timing is the host's: each warmed the host first, the candidate's and the baseline's
        assert r["host_warm"]["kernel"]["iterations"] > 0 and r["host_warm"]["eager"]["iterations"] > 0
    assert len(out.read_text().splitlines()) == 2
    assert "host warm-ups:" in first
    assert "passed: 2 of 2" in first and "identity |speedup vs eager - 1|" in first
    assert "this run: 0 evaluations" not in again and "passed: 2 of 2" in again
    # and each evaluation's phases were written down as they happened, under its task's name
    live = (tmp_path / "sweep.jsonl.progress.log").read_text().splitlines()
    for task in ("level1/19_ReLU", "level1/23_Softmax"):
        mine = [line for line in live if f" {task} " in line]
        assert any(line.endswith("reference: slot") for line in mine), live[-5:]
        assert any(line.endswith("candidate: done") for line in mine), live[-5:]


def test_the_summary_says_what_memory_admission_cost_and_what_was_held_of_it(bench_module):
    # given two GPU rows, one that waited for GPU memory and held more than it announced for its candidate
    sweep = bench_module("kernelbench_sweep")

    def row(task, waited, peak_ref, peak_cand):
        return {"task": task, "repeat": 0, "status": "passed", "message": "", "speedup": {"eager": 1.0},
                "gpu_exclusive_s": 1.0, "duration_s": 60.0, "gpu_held_s": 5.0, "gpu_wait_s": 2.0,
                "memory": {"admitted": True, "waited_s": waited, "announced": {"reference": 100, "candidate": 50,
                                                                              "total": 150},
                           "peak": {"reference": {"reserved": peak_ref, "allocated": peak_ref},
                                    "candidate": {"reserved": peak_cand, "allocated": peak_cand}}},
                "timeline": [["gpu memory: admitted", 1.0 + waited], ["judge: begun", 11.0 + waited]],
                "gpu_memory_bytes": 1000}

    text = sweep.summarize([row("level1/19_ReLU", 40.0, 50, 25), row("level1/46_Average_Pooling_3D", 0.0, 90, 70)],
                           120.0, 2)
    # then the summary gives the wait and names the row whose children held more than announced
    assert "waited for GPU memory (s/eval): median 20.00, total 40 over 2 admitted; longest level1/19_ReLU 40" in text
    assert "GPU memory reserved at most / announced (2 evaluations)" in text
    assert "over: level1/46_Average_Pooling_3D 1.07" in text
    # and the bound that holding those bytes puts on any schedule: 2 x 150 bytes x 10 s over 900 admitted
    assert "a bound of 3 s on any schedule of them on one GPU" in text


def test_the_summary_says_where_the_holds_of_the_tasks_too_large_to_share_the_gpu_went(bench_module):
    # given a GPU admitting 900 bytes, two rows announcing 600 (more than half: never two at once) and one 150
    sweep = bench_module("kernelbench_sweep")

    def row(task, total, timeline):
        return {"task": task, "repeat": 0, "status": "passed", "message": "", "speedup": {"eager": 1.0},
                "gpu_exclusive_s": 1.0, "duration_s": 20.0, "gpu_held_s": 5.0, "gpu_wait_s": 0.0,
                "memory": {"admitted": True, "waited_s": 0.0, "announced": {"total": total}},
                "timeline": timeline, "gpu_memory_bytes": 1000}

    big = [["sizing: measured", 0.5], ["gpu memory: admitted", 1.0], ["reference: trial", 3.0],
           ["reference: trial", 5.0], ["reference: compared trial 3", 6.0], ["candidate: timing_end", 9.0],
           ["judge: begun", 11.0], ["judge: done", 30.0]]
    other = [["gpu memory: admitted", 0.0], ["reference: trial", 50.0], ["judge: begun", 60.0]]
    text = sweep.summarize([row("level1/19_ReLU", 600, big), row("level1/20_LeakyReLU", 600, big),
                            row("level2/1_Conv2D_ReLU_BiasAdd", 150, other)], 120.0, 3)
    # then their holds add up, and each stretch is put on the mark that ended it, repeats and numbers together;
    # what came before the admission and after the judge began is no part of it
    assert ("announcing more than half of it (no two at once): 2 evaluations held theirs 20 s in all, median "
            "10.0 s, max 10.0 s; by the step that ended each stretch: reference: trial 8, candidate: timing_end 6, "
            "judge: begun 4, reference: compared trial 2") in text


def test_host_overhead_times_each_stage_in_its_own_process_against_plain(tmp_path):
    task = REPO / "tests" / "gpu_workers" / "hacks" / "tasks" / "scale_relu.py"
    out = tmp_path / "overhead.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "host_overhead.py"), str(task), "--device", "cpu",
                           "--stages", "plain,prepare,guard", "--repeat", "2", "--calls", "20", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["ratios"]) == {"plain", "prepare", "guard"} and report["ratios"]["plain"] == 1.0
    for stage, figures in report["figures"].items():
        assert len(figures) == 2 and all(f["samples"] == 20 and f["median_ms"] > 0 for f in figures), stage
    assert done.stdout.count("repeat ") == 2
    assert all(len(f["blocks_ms"]) == 5 for figures in report["figures"].values() for f in figures)
    # the evaluator's own timer in the same stages: its host series, and the time the reward stands on
    ours = tmp_path / "ours.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "host_overhead.py"), str(task), "--device", "cpu",
                           "--stages", "plain,guard", "--repeat", "1", "--calls", "30", "--timer", "ours", "--pin", "0",
                           "--out", str(ours)], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(ours.read_text())
    assert report["timer"] == "ours" and set(report["figures"]) == {"plain", "guard"}
    assert all(f["median_ms"] > 0 and f["reward_ms"] > 0 for figures in report["figures"].values() for f in figures)
    bad = subprocess.run([sys.executable, str(REPO / "bench" / "host_overhead.py"), str(task), "--stages", "guard"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "must name plain" in bad.stderr
