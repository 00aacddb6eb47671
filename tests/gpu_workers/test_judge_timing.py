"""The judge's checks on a timing's statistics."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from gpu_workers import EvalRequest, evaluate, judge
from gpu_workers.child.timinghost import ThreadWaits
from gpu_workers.pipeline import verdict
from gpu_workers.rules import default_rule_set
from gpu_workers.sandbox import process as sandbox
from gpu_workers.tasks import facts as taskfacts

RULES = default_rule_set("strict")


def test_a_cache_on_values_is_caught_when_every_first_sight_is_slow():
    # three timing inputs, each a miss on first sight (0.9 ms) and a hit after (0.03 ms)
    stats = {"first_sight_median_ms": 0.9, "first_sight_min_ms": 0.85, "repeat_median_ms": 0.03}
    finding = judge.repeat_finding(RULES, stats)
    assert finding is not None and finding.rule == "cached_repeats" and finding.severity == "reject"


def test_a_busy_host_delaying_two_first_sights_is_not_a_cache():
    # two of the three first iterations were held up on the host; the third ran as fast as the repeats
    stats = {"first_sight_median_ms": 0.7, "first_sight_min_ms": 0.031, "repeat_median_ms": 0.03}
    assert judge.repeat_finding(RULES, stats) is None


def test_small_absolute_differences_and_older_stats_are_handled():
    assert judge.repeat_finding(RULES, {"first_sight_min_ms": 0.04, "repeat_median_ms": 0.002}) is None  # < 0.05 ms
    old = {"first_sight_median_ms": 0.9, "repeat_median_ms": 0.03}  # a timing taken before the minimum was kept
    assert judge.repeat_finding(RULES, old) is not None
    assert judge.repeat_finding(RULES, {"first_sight_min_ms": 0.9}) is None  # no repeats (the CPU's timing)


def test_a_reward_that_took_the_end_to_end_time_goes_to_a_person_and_says_why():
    taken = {"timed": "end to end", "median_ms": 0.31, "net_median_ms": 0.31, "gpu_median_ms": 0.004,
             "host_median_ms": 0.012}
    finding = judge.unseen_work_finding(RULES, taken)
    assert finding.rule == "unseen_work" and finding.severity == "review"
    assert "0.31 ms end to end" in finding.message and "0.004 ms on the forward's stream" in finding.message
    assert judge.unseen_work_finding(RULES, {**taken, "timed": "kernel side"}) is None
    assert judge.unseen_work_finding(RULES, {"median_ms": 1.0}) is None  # a CPU timing, or one from before
    off = default_rule_set("strict")
    off["dynamic"]["unseen_work"]["enabled"] = False
    assert judge.unseen_work_finding(off, taken) is None


def _timing(iterations: int, per_call_ms: float, *, e2e: int = 0, spin_ms: float = 0.0) -> dict:
    return {"iterations": iterations, "median_ms": per_call_ms, "total_ms": iterations * per_call_ms,
            "e2e_total_ms": e2e * per_call_ms, "spin_total_ms": spin_ms}


def test_a_timer_that_reports_less_than_passed_loses_its_speed_reward():
    # given a loop whose own cost is 0.2 ms an iteration (the trusted baseline's) and a forward of
    # 1 ms, with 40 end-to-end iterations and 5 ms of spins, all inside the parent's wall clock
    real = _timing(120, 1.0, e2e=40, spin_ms=5.0)
    wall = 120 * 0.2 + judge.explained_ms(real)
    assert judge.timer_finding(RULES, wall_ms=wall, stats=real, overhead_ms_per_iter=0.2) is None
    # a timer patched to report half of what passed, on every series it times, is seen ...
    forged = {**real, **{k: 0.5 * real[k] for k in ("median_ms", "total_ms", "e2e_total_ms")}}
    finding = judge.timer_finding(RULES, wall_ms=wall, stats=forged, overhead_ms_per_iter=0.2)
    assert finding is not None and finding.rule == "timer_mismatch" and finding.severity == "review"
    assert "timer_mismatch" in RULES["withhold_speed"]
    # ... while the loop's cost moving by a third between timings is not held against an honest one
    assert judge.timer_finding(RULES, wall_ms=wall + 120 * 0.2 / 3, stats=real, overhead_ms_per_iter=0.2) is None


def test_wall_time_the_child_spent_waiting_for_a_cpu_is_not_held_against_its_timer():
    stats = _timing(100, 0.1)
    # 270 ms of wall time that neither the reported times nor the loop's cost explain ...
    forged = judge.timer_finding(RULES, wall_ms=300.0, stats=stats, overhead_ms_per_iter=0.2)
    assert forged is not None and forged.rule == "timer_mismatch"
    # ... unless the scheduler says the timing thread was waiting for a CPU for it
    assert judge.timer_finding(RULES, wall_ms=300.0, stats=stats, overhead_ms_per_iter=0.2,
                               descheduled_ms=270.0) is None
    still = judge.timer_finding(RULES, wall_ms=300.0, stats=stats, overhead_ms_per_iter=0.2, descheduled_ms=20.0)
    assert still is not None and "20.0 ms waiting for a CPU outside the timed calls left out" in still.message


def test_the_loop_cost_a_baseline_keeps_is_what_its_reported_times_leave_of_the_wall_clock():
    stats = _timing(120, 1.0, e2e=40, spin_ms=5.0)
    assert judge.loop_cost_ms(120 * 0.3 + judge.explained_ms(stats) + 7.0, 7.0, stats) == pytest.approx(0.3)
    assert judge.loop_cost_ms(None, None, stats) is None


def test_waits_for_a_cpu_inside_the_timed_calls_are_taken_off_the_wall_clock_once():
    # given a CPU baseline whose loop costs 3 ms an iteration, timed on a busy host: its thread waited
    # 150 ms for a CPU, 120 ms of it inside the timed calls, whose reported times hold those
    loaded = {**_timing(24, 10.0), "total_ms": 24 * 10.0 + 120.0, "window_waits_ms": 120.0}
    wall = 24 * 3.0 + judge.explained_ms(loaded) + 30.0
    # then its loop cost is the loop's, not less by what the calls waited
    assert judge.loop_cost_ms(wall, 150.0, loaded) == pytest.approx(3.0)
    assert judge.loop_cost_ms(wall, 150.0, {**loaded, "window_waits_ms": None}) == pytest.approx(-2.0)
    # and an honest candidate timed on a quiet host with that loop is not flagged against it
    quiet = _timing(24, 10.0)
    assert judge.timer_finding(RULES, wall_ms=24 * 3.0 + judge.explained_ms(quiet) + 1.0, stats=quiet,
                               overhead_ms_per_iter=3.0, descheduled_ms=1.0) is None
    # a count of waits inside beyond the span's leaves nothing outside to take off: no more slack than none
    hidden = {**quiet, "total_ms": 0.5 * quiet["total_ms"], "median_ms": 5.0}
    wall = 24 * 3.0 + judge.explained_ms(quiet) + 40.0
    for inside in (None, 0.0, 40.0, 1e9, "many"):
        finding = judge.timer_finding(RULES, wall_ms=wall, stats={**hidden, "window_waits_ms": inside},
                                      overhead_ms_per_iter=3.0, descheduled_ms=40.0)
        assert finding is not None and finding.rule == "timer_mismatch", inside


def test_a_thread_counts_its_own_waits_for_a_cpu():
    # given a spinner and this thread sharing one CPU
    cpu = min(os.sched_getaffinity(0))
    spinner = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c",
                                "import sys, threading\nthreading.Thread(target=sys.stdin.read, daemon=True).start()\n"
                                "print('ready', flush=True)\nwhile threading.active_count() > 1: pass\n"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    mine = os.sched_getaffinity(0)
    try:
        assert spinner.stdout.readline().strip() == "ready"
        os.sched_setaffinity(0, {cpu})  # this thread only
        with ThreadWaits() as waits:
            before = waits.seconds()
            end = time.thread_time() + 0.3  # 0.3 s on the CPU of its own, told by its own clock
            while time.thread_time() < end:
                pass
            after = waits.seconds()
    finally:
        os.sched_setaffinity(0, mine)
        spinner.stdin.close()
        spinner.wait()
    if before is None:
        pytest.skip("no /proc schedstat on this kernel")
    # then it waited for the CPU while the spinner had it
    assert after - before > 0.05, (before, after)


def test_the_scheduler_counts_waiting_for_a_cpu_and_not_sleeping():
    # given two spinners sharing one CPU and a process blocked on a read, each past its start-up (which
    # may wait for a CPU on a busy host: only what happens after each says "ready" is measured)
    spin = ("import sys, time\nprint('ready', flush=True)\nend = time.monotonic() + 0.6\n"
            "while time.monotonic() < end: pass\nprint('done', flush=True)\nsys.stdin.read()\n")
    cpu = min(os.sched_getaffinity(0))
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    busy = [subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", spin], **pipes) for _ in range(2)]
    sleeper = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                               **pipes)
    try:
        for p in busy + [sleeper]:
            assert p.stdout.readline().strip() == "ready"
        slept_before = sandbox.thread_clock(sleeper.pid)
        spun_before = [sandbox.thread_clock(p.pid) for p in busy]
        # when both have spun for 0.6 s (told by their own "done", not by a clock here)
        for p in busy:
            assert p.stdout.readline().strip() == "done"
        spun = [sandbox.thread_clock(p.pid) for p in busy]
        slept = sandbox.thread_clock(sleeper.pid)
    finally:
        for p in busy + [sleeper]:
            p.stdin.close()
            p.wait()
    if slept is None or slept_before is None:
        pytest.skip("no /proc schedstat on this kernel")
    # then each spinner ran and waited for its CPU ...
    for before, after in zip(spun_before, spun, strict=True):
        assert after[0] - before[0] > 0.05 and after[1] - before[1] > 0.05, (before, after)
    # ... while the blocked process neither ran nor waited, and had not blocked again
    assert slept[0] - slept_before[0] < 0.05 and slept[1] - slept_before[1] < 0.05
    assert slept[2] == slept_before[2]


SLOW_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        for _ in range(2000):  # two thousand tiny ops: the eager baseline is slow
            x = x + 0.001
        return x


def get_inputs():
    return [torch.randn(16)]


def get_init_inputs():
    return []
# RUN
'''
ONE_OP = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x + 2.0
'''


def test_a_speedup_far_past_the_line_is_flagged_even_before_the_baseline_settles(kernelcourt_cache_dir):
    task = SLOW_TASK.replace("# RUN", f"# run {time.time_ns()}")  # a task never timed before: one eager sample
    result = evaluate(EvalRequest(task_source=task, kernel_source=ONE_OP, device="cpu", track="open",
                                  baselines=("eager",), timing_budget_s=0.1, atol=1e-3, rtol=1e-3))
    assert result.status == "passed", result.message
    line = float(RULES["thresholds"]["extreme_speedup"]) * verdict.UNSETTLED_LINE  # while unsettled
    assert result.speedup["eager"] > line, result.speedup  # hundreds of times here
    flagged = [f for f in result.findings if f.rule == "extreme_speedup"]
    assert len(flagged) == 1 and flagged[0].severity == "review"
    assert f"rests on 1 of {taskfacts.samples()} timings" in flagged[0].message


def test_a_kept_output_is_copied_into_its_room_when_it_fits_and_snapshotted_when_not():
    import torch

    from gpu_workers.child.measure import snapshot
    from gpu_workers.child.timing import into_slot

    # given the room made before the loop from the warm-up's output (a tensor and a scalar leaf)
    room = snapshot((torch.zeros(4, 3), 7))
    out = (torch.arange(12.0).reshape(4, 3), 8)
    # when an output of the same shape is kept
    kept = into_slot(room, out)
    # then its values are in the room (not the candidate's own memory), its other leaves as they came
    assert kept[0] is room[0] and kept[0].data_ptr() != out[0].data_ptr()
    assert torch.equal(kept[0], out[0]) and kept[1] == 8
    out[0].fill_(-1.0)  # a change the candidate makes later is not in the kept copy
    assert torch.equal(kept[0], torch.arange(12.0).reshape(4, 3))
    # and an output that does not fit the room (another shape, dtype or structure) is snapshotted afresh
    for other in ((torch.ones(2, 3), 8), (torch.ones(4, 3, dtype=torch.float64), 8), (torch.ones(4, 3),)):
        again = into_slot(room, other)
        assert again[0] is not room[0] and torch.equal(again[0], other[0])
    assert into_slot(None, out)[0] is not out[0]


def test_an_event_timer_below_what_the_host_saw_each_window_keep_the_gpu_busy_is_seen():
    # a 0.07 ms kernel whose event timer reports half: far inside the loop's own cost (1.2 ms an
    # iteration), but each window's GPU time by the host's clock is the same iterations' own
    honest = {**_timing(75, 0.07, e2e=25, spin_ms=75.0), "host_gpu_ms": 0.072}
    wall = 75 * 1.2 + judge.explained_ms(honest)
    assert judge.timer_finding(RULES, wall_ms=wall, stats=honest, overhead_ms_per_iter=1.2) is None
    forged = {**honest, "median_ms": 0.035, "total_ms": 75 * 0.035}
    finding = judge.timer_finding(RULES, wall_ms=wall, stats=forged, overhead_ms_per_iter=1.2)
    assert finding is not None and "host's clock saw each timed window" in finding.message
    # a few microseconds either way is the host's own noise, never a finding
    assert judge.timer_finding(RULES, wall_ms=wall, stats={**honest, "host_gpu_ms": 0.078},
                               overhead_ms_per_iter=1.2) is None
