"""judge: findings from the watch, the linkage, fingerprints and CPU time; speed withheld in the reward."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import torch

from gpu_workers import judge
from gpu_workers.child.isolation import Fingerprint
from gpu_workers.reward import compute_reward
from gpu_workers.rules import default_rule_set, validate_rule_set
from gpu_workers.schema import EvalResult, Finding

STRICT, OPEN = default_rule_set("strict"), default_rule_set("open")


def test_thread_budget_fires_beyond_the_budget_only():
    stats = {"cpu_s": 0.30, "window_s": 0.10}
    finding = judge.thread_budget_finding(STRICT, stats, threads=1)
    assert finding.rule == "thread_budget" and finding.severity == "review" and "3.00 threads busy" in finding.message
    assert judge.thread_budget_finding(STRICT, stats, threads=4) is None
    assert judge.thread_budget_finding(STRICT, {"cpu_s": 0.12, "window_s": 0.10}, threads=1) is None


def test_thread_budget_holds_for_the_calls_the_median_stands_on():
    from gpu_workers.child.timing import _window_cpu

    # given four busy calls on two threads and three idle ones (a sleep each) between them
    windows = [(0.004, 0.002)] * 4 + [(0.0, 0.030)] * 3
    stats = _window_cpu(windows)
    # then over all the windows the CPU time is inside one thread, over the shorter half it is not
    assert stats["cpu_s"] < stats["window_s"] and stats["cpu_fast_s"] == pytest.approx(2 * stats["window_fast_s"])
    finding = judge.thread_budget_finding(STRICT, stats, threads=1)
    assert finding.rule == "thread_budget" and "shorter half" in finding.message
    assert judge.thread_budget_finding(STRICT, stats, threads=2) is None


def test_fingerprint_finding_names_the_calls_that_are_not_their_inputs_answers():
    fp = Fingerprint(7)
    answers = [torch.randn(1000) for _ in range(3)]
    rotations = [{"fingerprint": fp.of([a]), "bounds": Fingerprint.bounds([a], 1e-2, 1e-2)} for a in answers]
    honest = [[r, fp.of([answers[r]])] for r in range(3)]
    assert judge.fingerprint_finding(STRICT, honest, rotations) is None
    replayed = honest[:2] + [[2, fp.of([answers[0]])]]  # the third call got the first call's answer
    finding = judge.fingerprint_finding(STRICT, replayed, rotations)
    assert finding.rule == "timed_fingerprint_mismatch" and finding.severity == "reject"
    assert finding.message.split(": ", 1)[1].startswith("1 of 3 timed calls; input set 3:")


def test_a_timed_call_on_a_set_the_reference_never_answered_is_a_mismatch():
    # given the reference's answers for two of three sets (the third never asked for, or not a set of
    # this evaluation), and fingerprints the candidate's process sent, one of them malformed
    fp = Fingerprint(7)
    answers = [torch.randn(100) for _ in range(3)]
    rotations = [{"fingerprint": fp.of([a]), "bounds": Fingerprint.bounds([a], 1e-2, 1e-2)} for a in answers[:2]]
    rotations.append(None)
    for timed in ([[0, fp.of([answers[0]])], [2, fp.of([answers[2]])]],
                  [[0, fp.of([answers[0]])], [7, fp.of([answers[1]])]],
                  [[0, fp.of([answers[0]])], "1"]):
        # then the call the reference cannot vouch for is not passed over
        finding = judge.fingerprint_finding(STRICT, timed, rotations)
        assert finding.rule == "timed_fingerprint_mismatch" and "no reference answer" in finding.message
    # the reference is asked only for sets it has no answer for: a set kept whole keeps its outputs
    timing = {"fingerprints": [[0, []], "1", [5, [], 3], [2, []], [7, []], [-1, []]]}
    assert judge.unanswered_sets(timing, rotations) == [2, 7, -1]
    assert judge.unanswered_sets({"fingerprints": "x"}, rotations) == []


def test_watch_findings_list_what_ran_inside_forward():
    report = {"watched": True, "library_ops": {"aten::addmm": 34}, "library_kernels": {"ampere_sgemm_64x64": 5},
              "numpy": {"torch numpy": 3}}
    finding, = judge.watch_findings(STRICT, report)
    assert finding.rule == "library_compute" and finding.severity == "reject"
    for part in ("aten::addmm ×34", "ampere_sgemm_64x64 ×5", "torch numpy ×3"):
        assert part in finding.message
    assert judge.watch_findings(STRICT, {"watched": True, "library_ops": {}}) == []
    assert judge.watch_findings(OPEN, report) == []  # library compute is the open track's to use


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_linkage_findings_read_the_candidates_objects_only(tmp_path):
    build = tmp_path / "build"
    build.mkdir()
    src = tmp_path / "ext.cpp"
    src.write_text('extern "C" void SGEMM(int*);\nextern "C" void run(int* n) { SGEMM(n); }\n')
    obj = build / "ext.so"
    subprocess.run(["g++", "-shared", "-fPIC", str(src), "-o", str(obj)], check=True)
    objects = {"before": {}, "after": {str(obj): obj.stat().st_ino, "/usr/lib/libm.so.6": 1},
               "own_roots": [str(build)]}
    finding, = judge.linkage_findings(STRICT, objects)
    assert finding.rule == "library_binding" and "ext.so: SGEMM" in finding.message
    assert judge.linkage_findings(OPEN, objects) == []
    # an object replaced after it was loaded cannot vouch for what was loaded
    replaced = {**objects, "after": {str(obj): obj.stat().st_ino + 1}}
    finding, = judge.linkage_findings(STRICT, replaced)
    assert "gone or replaced since it was loaded" in finding.message


def test_speed_withheld_leaves_the_correctness_reward():
    result = EvalResult(status="passed", correct=True, speedup={"eager": 3.0, "compile": 2.0},
                        findings=[Finding("precision_downgrade", "review", "in the band")])
    assert compute_reward(result) == 3.0
    result.speed_withheld = ["precision_downgrade"]
    assert compute_reward(result) == 1.0
    assert compute_reward(result, "kevin") == pytest.approx(0.3)
    assert compute_reward(result, "clipped_speedup") == 0.0


def test_withhold_speed_is_validated_data():
    assert default_rule_set("strict")["withhold_speed"] == ["precision_downgrade", "thread_budget", "device_time",
                                                          "timer_mismatch"]
    with pytest.raises(ValueError, match="withhold_speed names unknown checks"):
        validate_rule_set({"track": "strict", "withhold_speed": ["no_such_check"]})


def test_unjoined_stream_needs_unexplained_time_and_kernels_on_another_stream():
    report = {"watched": True, "other_stream_kernels": {"scale_relu_slow(float const*, float*, long)": 40}}
    stats = {"timed": "end to end", "net_median_ms": 2.0, "gpu_median_ms": 0.01}
    finding = judge.unjoined_stream_finding(STRICT, stats, report)
    assert finding.rule == "unjoined_stream" and finding.severity == "reject" and "scale_relu_slow" in finding.message
    assert judge.unjoined_stream_finding(STRICT, {**stats, "timed": "kernel side"}, report) is None
    assert judge.unjoined_stream_finding(STRICT, stats, {"other_stream_kernels": {}}) is None
    assert judge.unjoined_stream_finding(OPEN, stats, report) is None


def test_a_timing_that_reports_less_than_the_device_ran_gets_no_speed_reward():
    # given CUPTI's device time per watched call (the timing's calls and the trials' alike)
    report = {"watched": True, "kernel_spans_us": [100.0] * 40 + [12.0, 0.0]}
    # then a timer that reports half of it is found, and the finding withholds the speed reward
    finding = judge.device_time_finding(STRICT, {"median_ms": 0.05}, report)
    assert finding.rule == "device_time" and finding.severity == "review" and "0.1 ms per call" in finding.message
    assert "device_time" in STRICT["withhold_speed"]
    # and an honest timing, which brackets its kernels (launch gaps, the spin's end, the read), is not
    assert judge.device_time_finding(STRICT, {"median_ms": 0.104}, report) is None
    # nor one on a timer's resolution below a tiny kernel's device time, nor where nothing was watched
    assert judge.device_time_finding(STRICT, {"median_ms": 0.0035}, {"kernel_spans_us": [4.0] * 10}) is None
    assert judge.device_time_finding(STRICT, {"median_ms": 0.05}, {"watched": False, "kernel_spans_us": []}) is None
