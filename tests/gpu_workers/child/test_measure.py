"""The judge's measurement primitives: its snapshot of the functions it relies on (taken without importing
torch._dynamo), when a timing stops, and the timing's host side (spin waits, CPUs)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from gpu_workers.child import timing, timinghost

ROOT = Path(__file__).resolve().parents[3]

PROBE = r'''
import sys
import torch
from gpu_workers.child import measure
assert "torch._dynamo" not in sys.modules, "measure must not import dynamo (a second or two per child)"
import torch._dynamo  # what a candidate's torch.compile does: it rebinds torch.manual_seed
print("after dynamo:", measure.patched_attributes())
original = measure._ORIGINALS[(id(torch), "manual_seed")]
torch.manual_seed = torch._disable_dynamo(lambda seed: original(0))  # the same wrapper around another function
print("lookalike:", measure.patched_attributes())
'''


def test_dynamos_own_wrapper_is_no_patch_but_the_same_wrapper_round_another_function_is():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert lines["after dynamo"] == "[]"
    assert "torch.manual_seed" in lines["lookalike"]


def test_a_median_is_settled_only_when_its_confidence_interval_is_narrow():
    tight = [1.0 + 0.001 * ((i * 37) % 11 - 5) for i in range(100)]
    assert timing._median_settled(tight, 0.01)
    assert not timing._median_settled(tight[:99], 0.01)  # too few to say
    wide = [0.5 + (i * 37 % 100) / 100 for i in range(100)]  # 0.5 .. 1.49, evenly
    assert not timing._median_settled(wide, 0.01)
    assert timing._median_settled(wide * 100, 0.01)  # the same spread, many more samples
    short = [0.040 + 0.000_08 * (i * 37 % 100) for i in range(100)]  # 40-48 µs: the median to ±0.8 µs
    assert not timing._median_settled(short, 0.01)  # not to 1% ...
    assert timing._median_settled(short, 0.01, resolution=0.001)  # ... but to the timer's resolution


def test_timing_stops_once_the_median_is_known(monkeypatch):
    # each sample is the next of 1..97 ms in a fixed shuffle: the stopping rule alone decides, not
    # how busy this machine is
    samples = itertools.cycle([float(1 + (i * 37) % 97) for i in range(97)])
    monkeypatch.setattr(timing, "charged_ms", lambda *_args: next(samples))
    x = torch.randn(64)
    stats = timing.time_callable(torch.neg, [x], [[torch.randn(64)], [torch.randn(64)]], torch.device("cpu"),
                                  budget_s=60.0, max_iters=1000, target_spread=0.0, settle_within=0.5)
    assert stats["iterations"] == timing.SETTLE_MIN_ITERS  # the first check: a ±50% median is known at once
    stats = timing.time_callable(torch.neg, [x], [[torch.randn(64)]], torch.device("cpu"),
                                  budget_s=60.0, max_iters=130, target_spread=0.0, settle_within=0.0)
    assert stats["iterations"] == 130  # never settled to 0%: the cap


def test_the_spin_before_a_kernel_side_timing_covers_the_hosts_queueing_time():
    assert timing.spin_cycles(0.001) == timing.MIN_SPIN_CYCLES
    assert timing.spin_cycles(50.0) == timing.SPIN_CYCLES
    assert timing.spin_cycles(0.2) == 640_000  # (1.5 × 0.2 + 0.02) ms at ~2 GHz


def test_work_outside_the_forwards_stream_is_what_host_and_kernel_side_cannot_explain():
    # honest: launched after ~20 µs of host time, then 150 µs of kernel, both seen
    assert not timing._outside_work(net_ms=0.17, host_ms=0.03, kernel_ms=0.15)
    # a few µs of disagreement between medians is not work: 5% of the kernel side, at least 5 µs
    assert not timing._outside_work(net_ms=0.03 + 0.15 + 0.0074, host_ms=0.03, kernel_ms=0.15)
    assert not timing._outside_work(net_ms=0.021 + 0.002 + 0.0049, host_ms=0.021, kernel_ms=0.002)
    # 65 µs of work on a stream the forward never joined: its own stream saw 1.5 µs
    assert timing._outside_work(net_ms=0.078, host_ms=0.024, kernel_ms=0.0015)
    assert timing._outside_work(net_ms=0.03 + 0.15 + 0.008, host_ms=0.03, kernel_ms=0.15)


def test_spin_waits_change_nothing_off_cuda():
    with timinghost.SpinWaits(torch.device("cpu")) as waits:
        assert waits.mode == "default"
    stats = timing.time_callable(torch.neg, [torch.randn(8)], [[torch.randn(8)]], torch.device("cpu"),
                                  budget_s=0.05, max_iters=10)
    assert stats["host_waits"] == "default"
    assert stats["host_cpus"] and set(stats["host_cpus"]) <= os.sched_getaffinity(0)  # where the timing ran


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cuda_timing_spins_while_it_waits_and_gives_the_context_its_flags_back():
    device = torch.device("cuda")
    x = torch.randn(1 << 20, device=device)
    torch.cuda.synchronize()
    before = timinghost.context_sched_flags()
    assert before is not None  # a driver and a current context
    with timinghost.SpinWaits(device) as waits:
        assert waits.mode == "spin"
        assert timinghost.context_sched_flags() == timinghost.CU_CTX_SCHED_SPIN
        torch.cuda.synchronize()
    assert timinghost.context_sched_flags() == before
    stats = timing.time_callable(torch.neg, [x], [[torch.randn_like(x)]], device, budget_s=0.05, max_iters=50)
    assert stats["host_waits"] == "spin" and timinghost.context_sched_flags() == before
    stats = timing.time_callable(torch.neg, [x], [[torch.randn_like(x)]], device, budget_s=0.05, max_iters=50,
                                  spin_waits=False)
    assert stats["host_waits"] == "default" and timinghost.context_sched_flags() == before


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_first_sights_a_busy_host_delayed_past_the_spin_are_no_evidence_of_a_cache():
    from gpu_workers import judge
    from gpu_workers.rules import default_rule_set

    device = torch.device("cuda")
    x = torch.randn(1 << 16, device=device)  # a few microseconds of work: the host's delay would dwarf it
    rotations = [[torch.randn_like(x)] for _ in range(3)]
    calls = [0]
    warmup = 2

    def honest_but_descheduled(t):  # as if the host lost its CPU right after the spin's launch, three times
        calls[0] += 1
        if warmup < calls[0] <= warmup + len(rotations):
            time.sleep(0.003)  # longer than the longest spin (~1 ms)
        return torch.neg(t)

    stats = timing.time_callable(honest_but_descheduled, [x], rotations, device, budget_s=0.2, max_iters=200,
                                 warmup=warmup)
    assert stats["first_sights_uncovered"] == len(rotations)
    assert stats["first_sight_min_ms"] is None  # each first sight was delayed: none is evidence
    # the delay past the spin did reach the kernel-side samples (the start event follows the ~1 ms spin)
    assert stats["max_ms"] > 1.5
    assert judge.repeat_finding(default_rule_set("strict"), stats) is None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_gpu_bound_forward_is_timed_on_its_stream_and_work_off_it_end_to_end():
    device = torch.device("cuda")
    # 256 MB each way: 0.1-0.2 ms of real work, well past the 20-25 us the host takes between the two
    # events of an empty stream (at 64 MB the work was 43 us on the H100, and that gap half of it)
    x = torch.randn(1 << 26, device=device)
    rotations = [[torch.randn_like(x)]]
    stats = timing.time_callable(torch.neg, [x], rotations, device, budget_s=0.2, max_iters=200)
    assert stats["timed"] == "kernel side", stats
    assert stats["median_ms"] == stats["gpu_median_ms"] > stats["host_median_ms"] > 0
    assert stats["e2e_iterations"] == stats["iterations"] // timing.ROUND_TRIP_EVERY > 0
    assert 0 < stats["round_trip_ms"] < stats["e2e_median_ms"]
    assert stats["gpu_median_ms"] < stats["e2e_median_ms"]  # the host's latency is left out

    side = torch.cuda.Stream(device)

    def off_stream(t):  # the same work on a stream the forward never joins
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            out = torch.neg(t)
        return out

    hidden = timing.time_callable(off_stream, [x], rotations, device, budget_s=0.2, max_iters=200)
    # the work may fit inside the call's own host time (the stream switch, the wait): then the host
    # series covers it; what matters is that the reward's time does, whichever series it is
    assert hidden["timed"] in ("end to end", "host"), hidden
    assert hidden["gpu_median_ms"] < 0.5 * stats["gpu_median_ms"], hidden  # the forward's own stream saw nothing
    assert hidden["median_ms"] >= 0.8 * stats["gpu_median_ms"], hidden  # the reward did
    series = "net_median_ms" if hidden["timed"] == "end to end" else "host_median_ms"
    assert hidden["median_ms"] == hidden[series], hidden


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_forward_that_tells_the_end_to_end_iterations_apart_misses_on_their_own_inputs():
    from gpu_workers import judge
    from gpu_workers.rules import default_rule_set

    device = torch.device("cuda")
    x = torch.randn(4096, 4096, device=device)
    rotations = [[torch.randn_like(x)] for _ in range(5)]
    side = torch.cuda.Stream(device)
    answers: dict[float, torch.Tensor] = {}
    calls = [0]
    warmup = 2

    def work(t):  # a few milliseconds: a cache hit costs a read of 8 values (the review flags 10x faster repeats)
        return (t @ t).tanh() @ t

    def sly(t):  # counts calls to know the end-to-end iterations: answers them from a cache, works off-stream in the others
        n, calls[0] = calls[0], calls[0] + 1
        end_to_end = n >= warmup and (n - warmup) % (timing.ROUND_TRIP_EVERY + 1) == timing.ROUND_TRIP_EVERY
        key = round(float(t[0, :8].sum()), 3)
        if not end_to_end:
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                out = work(t)
            answers[key] = out
            return out
        if key not in answers:
            answers[key] = work(t)
        return answers[key]

    fooled = timing.time_callable(sly, [x], rotations, device, budget_s=0.5, max_iters=200, warmup=warmup)
    assert fooled["timed"] != "end to end"  # shared input sets: the cache answers every end-to-end iteration
    answers.clear()
    calls[0] = 0
    stats = timing.time_callable(sly, [x], rotations, device, budget_s=0.5, max_iters=200, warmup=warmup,
                                 e2e_rotations=2)
    assert len(stats["kept_outputs"]) == 5  # the end-to-end iterations' outputs are kept too
    for kept, (t,) in zip(stats["kept_outputs"], rotations):
        torch.testing.assert_close(kept[0], work(t))
    rules = default_rule_set("strict")
    # on shared input sets every end-to-end iteration is a cache hit, and nothing looks wrong ...
    assert judge.repeat_finding(rules, fooled, "e2e_") is None
    # ... on their own, the first sight of each misses, and the repeats give the cache away
    finding = judge.repeat_finding(rules, stats, "e2e_")
    assert finding is not None and "end-to-end timing input" in finding.message, {
        k: v for k, v in stats.items() if k != "kept_outputs"}


def test_a_timing_can_be_held_to_some_cpus_and_gets_its_own_back():
    mine = os.sched_getaffinity(0)
    one = min(mine)
    stats = timing.time_callable(torch.neg, [torch.randn(8)], [[torch.randn(8)]], torch.device("cpu"),
                                  budget_s=0.05, max_iters=60, cpus=[one])
    assert stats["host_cpus"] == [one]
    assert os.sched_getaffinity(0) == mine


def test_timings_move_to_the_gpus_node_only_when_asked_and_only_where_there_is_another(monkeypatch):
    from gpu_workers.pipeline.plan import timing_options
    from gpu_workers.settings import EvaluatorSettings

    mine = sorted(os.sched_getaffinity(0))
    some = {"gpu": {"local_cpus": mine[:1]}}
    anywhere, local = EvaluatorSettings(), EvaluatorSettings(timing_cpus="gpu-local", settle_within=0.02)
    assert "cpus" not in timing_options(some, anywhere) and timing_options(some, anywhere)["spin_waits"] is True
    assert timing_options(some, anywhere)["settle_within"] == 0.01
    assert timing_options(some, local)["settle_within"] == 0.02
    if len(mine) > 1:
        assert timing_options(some, local)["cpus"] == mine[:1]
    assert "cpus" not in timing_options({"gpu": {"local_cpus": mine}}, local)  # one node: nowhere better to go
    assert "cpus" not in timing_options({"device": "cpu"}, local)


def test_a_window_charges_the_forward_and_only_the_reads_excess():
    # an honest forward: its read took what an ordinary tensor's does (noise within the slack)
    assert timing.charged_ms(2.0, 1.01, 1.0) == 2.0
    assert timing.charged_ms(2.0, 0.5, 1.0) == 2.0  # a read faster than the estimate takes nothing off
    # an output filled on first touch: the filling happens in the read, and the forward pays for it
    assert timing.charged_ms(0.1, 3.0, 1.0) == pytest.approx(0.1 + 3.0 - timing.READ_SLACK - timing.READ_SLACK_MS)
    assert timing.charged_ms(-0.001, 0.0, 0.0) == 0.0


def test_a_cpu_timing_reports_how_far_its_reads_went_past_an_ordinary_read():
    x = torch.randn(1 << 16)
    stats = timing.time_callable(torch.neg, [x], [[torch.randn_like(x)] for _ in range(3)], torch.device("cpu"),
                                 budget_s=0.2, max_iters=30)
    assert stats["read_ms"] > 0 and "read_excess_max_ms" in stats
    assert stats["median_ms"] > 0


def test_an_output_changed_after_the_window_s_read_is_counted_and_a_final_one_is_not(monkeypatch):
    x = torch.randn(4096)
    rotations = [[torch.randn_like(x)] for _ in range(2)]
    honest = timing.time_callable(torch.neg, [x], rotations, torch.device("cpu"), budget_s=0.05, max_iters=20)
    assert honest["changed_after_read"] == 0

    # a writer that finishes the output only once the window's read of it is over: the read wakes it
    # and waits until it has written (an order made by events, not by timing)
    pending: list[torch.Tensor] = []
    wake, written = threading.Event(), threading.Event()
    stop = False

    def writer():
        while True:
            wake.wait()
            wake.clear()
            if stop:
                return
            torch.neg(pending.pop(), out=out_box[0])
            written.set()

    out_box: list[torch.Tensor] = []

    def returns_early(t):
        out_box[:] = [torch.zeros_like(t)]
        pending.append(t)
        return out_box[0]

    real_read_all = timing.read_all

    def read_then_let_it_write(leaves):
        sums = real_read_all(leaves)
        if pending:
            written.clear()
            wake.set()
            written.wait()
        return sums

    monkeypatch.setattr(timing, "read_all", read_then_let_it_write)
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        late = timing.time_callable(returns_early, [x], rotations, torch.device("cpu"), budget_s=0.05, max_iters=20)
    finally:
        stop = True
        wake.set()
        thread.join()
    assert late["changed_after_read"] == late["iterations"] > 0


def test_host_time_is_steady_when_its_last_two_blocks_agree():
    block = timing.HOST_WARM_BLOCK
    assert not timing.host_steady([1.0] * (2 * block - 1))  # too few to say
    assert timing.host_steady([3.0] * block + [1.0] * (2 * block))
    assert not timing.host_steady([3.0] * (2 * block) + [1.0] * block)  # still coming down
    assert not timing.host_steady([1.0] * block + [1.1] * block)


def test_a_host_bound_timing_begins_once_the_hosts_time_is_steady(monkeypatch):
    # given a forward whose first calls are slow, as a vCPU's first stretch after idling was on the
    # H200, on a clock only the forward moves (the rule alone decides, not this machine's load)
    slow_calls, calls, timed_from, clock = 40, [0], [], [0.0]
    monkeypatch.setattr(timing, "_perf_counter", lambda: clock[0])

    def ramping(t):
        calls[0] += 1
        clock[0] += 0.002 if calls[0] <= slow_calls else 0.0002
        return t * 2.0

    x = torch.randn(64)
    stats = timing.time_callable(ramping, [x], [[torch.randn(64)], [torch.randn(64)]], torch.device("cpu"),
                                 budget_s=60.0, max_iters=120, host_warm_s=30.0,
                                 on_timed=lambda: timed_from.append(calls[0]))
    # then every slow call ran before the parent was told the timing began, and none was timed
    assert stats["host_warm"]["steady"] is True and stats["host_warm"]["last_ms"] == pytest.approx(0.2)
    assert timed_from and timed_from[0] >= slow_calls
    assert stats["max_ms"] == pytest.approx(0.2)
    # and without the warm-up the timed iterations begin after the plain warm-up's two calls
    calls[0], timed_from[:] = 0, []
    stats = timing.time_callable(ramping, [x], [[torch.randn(64)], [torch.randn(64)]], torch.device("cpu"),
                                 budget_s=60.0, max_iters=120, on_timed=lambda: timed_from.append(calls[0]))
    assert stats["host_warm"]["iterations"] == 0 and timed_from == [2]
    assert stats["max_ms"] == pytest.approx(2.0)  # slow calls were timed


def test_the_host_warm_up_on_cuda_follows_whether_the_host_is_what_is_timed():
    def fake(host_ms, kernel_ms):  # an iteration that reports a call's host and kernel-side times
        host, kernel, calls = [host_ms(0)], [kernel_ms(0)], [0]

        def iteration(_inputs):
            calls[0] += 1
            host.append(host_ms(calls[0]))
            kernel.append(kernel_ms(calls[0]))

        return iteration, host, kernel

    # a kernel-side bound forward is not warmed at all
    iteration, host, kernel = fake(lambda n: 0.1, lambda n: 1.0)
    assert timing._warm_host(iteration, [], host, kernel, 30.0, True, 40)["iterations"] == 0
    # one whose host outlasts its kernels only while slow stops once it no longer does
    iteration, host, kernel = fake(lambda n: 2.0 if n < 5 else 0.1, lambda n: 1.0)
    warm = timing._warm_host(iteration, [], host, kernel, 30.0, True, 40)
    assert warm["iterations"] == 9 and warm["steady"] is False  # most of its last block of 8 fast
    # a host-bound one runs until steady: here at its call cap, its last two blocks equal
    iteration, host, kernel = fake(lambda n: 2.0 if n < 20 else 1.0, lambda n: 0.1)
    warm = timing._warm_host(iteration, [], host, kernel, 30.0, True, 40)
    assert warm["steady"] is True and warm["iterations"] == 40 and warm["last_ms"] == 1.0


def test_kept_outputs_go_into_the_rooms_given_and_any_other_kept_set_gets_its_own():
    # a baseline's loop copies what the candidate's keeps into the reference's own outputs for those sets
    rotations = [[torch.full((4, 4), float(r))] for r in range(6)]
    rooms = {r: [torch.zeros(4, 4)] for r in (1, 3)}
    buffers = [torch.zeros(4, 4)]
    stats = timing.time_callable(lambda x: x * 2.0, buffers, rotations, torch.device("cpu"), budget_s=10.0,
                                 max_iters=6, keep={1, 2, 3}, rooms=rooms)
    assert stats["kept_rotations"] == [1, 2, 3]
    by_set = dict(zip(stats["kept_rotations"], stats["kept_outputs"]))
    for r in (1, 3):
        assert by_set[r][0] is rooms[r][0] and torch.equal(rooms[r][0], torch.full((4, 4), 2.0 * r))
    assert all(by_set[2][0] is not room[0] for room in rooms.values())
    assert torch.equal(by_set[2][0], torch.full((4, 4), 4.0))
