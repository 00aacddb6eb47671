"""GPU slots: work overlaps, timings run alone, across threads and processes.

Threads are ordered by events and by what the slot's lock files show (a timer queued holds the
"want" file shared and, once first in line, the turnstile), never by sleeping; the logs are checked by
the order of their entries, never by elapsed time.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading

import pytest

from gpu_workers.build.toolchain import cache_root
from gpu_workers.hardware import visible_device
from gpu_workers.sandbox.gpuslot import SlotUse, gpu_slot, slot_name

H200_A = {"name": "NVIDIA H200", "gpu": {"index": 0, "uuid": "GPU-aaaa-1111"}}
H200_B = {"name": "NVIDIA H200", "gpu": {"index": 1, "uuid": "GPU-bbbb-2222"}}
WAIT_S = 30.0  # only a bound on a wait that a broken slot would make endless


def _held_by_another(hardware, part: str) -> bool:
    """Whether some holder (in any thread or process) has this lock file of the slot."""
    fd = os.open(cache_root() / "locks" / f"gpu-{slot_name(hardware)}.{part}", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's own lock, if it got one
    return False


def _until(condition) -> None:
    """Wait until ``condition()`` holds: a real state of the slot, checked again at once."""
    gate = threading.Event()
    for _ in range(10_000_000):
        if condition():
            return
        gate.wait(0)  # give the other threads the interpreter
    raise AssertionError("the slot never reached the state waited for")


def _shared_holds(hardware, part: str) -> int:
    """How many shared locks (granted, not waiting) the kernel lists on this lock file of the slot."""
    inode = os.stat(cache_root() / "locks" / f"gpu-{slot_name(hardware)}.{part}").st_ino
    with open("/proc/locks") as table:
        return sum(1 for line in table if "->" not in line and " FLOCK " in f" {line} " and " READ " in line
                   and line.split()[5].endswith(f":{inode}"))


def _timer_first_in_line(hardware) -> None:
    _until(lambda: _held_by_another(hardware, "turnstile"))


def _hold(hardware, log, label, mode="exclusive", inside=None, release=None):
    """Hold the slot: log the entry, say so, stay until released (when given), log the exit."""
    with gpu_slot(hardware, mode=mode):
        log.append((label, "in"))
        if inside is not None:
            inside.set()
        if release is not None:
            assert release.wait(WAIT_S)
        log.append((label, "out"))


def _thread(*args, **kwargs) -> threading.Thread:
    thread = threading.Thread(target=_hold, args=args, kwargs=kwargs)
    thread.start()
    return thread


def _most_inside(log) -> int:
    inside = most = 0
    for _, kind in log:
        inside += 1 if kind == "in" else -1
        most = max(most, inside)
    return most


def test_timings_on_one_gpu_never_overlap_and_two_gpus_do():
    # given a timing inside the slot and three more queued behind it
    same: list = []
    first_in, let_go = threading.Event(), threading.Event()
    first = _thread(H200_A, same, 0, inside=first_in, release=let_go)
    assert first_in.wait(WAIT_S)
    rest = [_thread(H200_A, same, i) for i in range(1, 4)]
    _timer_first_in_line(H200_A)
    # when the first lets go
    let_go.set()
    for t in [first, *rest]:
        t.join()
    # then each ran alone
    assert len(same) == 8 and _most_inside(same) == 1

    # two GPUs: a timing on each, both inside at once
    both: list = []
    inside = [threading.Event(), threading.Event()]
    done = threading.Event()
    threads = [_thread(hw, both, i, inside=inside[i], release=done) for i, hw in enumerate([H200_A, H200_B])]
    assert inside[0].wait(WAIT_S) and inside[1].wait(WAIT_S)
    done.set()
    for t in threads:
        t.join()
    assert _most_inside(both) == 2


def _hold_in_process(label, ticket, queue, inside, release):
    with gpu_slot(H200_A, mode="exclusive"):
        with ticket.get_lock():
            ticket.value += 1
            queue.put((label, "in", ticket.value))
        inside.set()
        release.wait(WAIT_S)
        with ticket.get_lock():
            ticket.value += 1
            queue.put((label, "out", ticket.value))


def test_the_slot_holds_across_worker_processes():
    ctx = multiprocessing.get_context("spawn")
    queue, ticket = ctx.Queue(), ctx.Value("i", 0)
    inside = [ctx.Event(), ctx.Event()]
    release = [ctx.Event(), ctx.Event()]
    procs = [ctx.Process(target=_hold_in_process, args=(i, ticket, queue, inside[i], release[i])) for i in range(2)]
    procs[0].start()
    assert inside[0].wait(WAIT_S)
    procs[1].start()
    _timer_first_in_line(H200_A)  # the second process queued behind the first
    release[1].set()
    release[0].set()
    for p in procs:
        p.join(timeout=60)
    events = sorted((queue.get(timeout=5) for _ in range(4)), key=lambda e: e[2])
    assert [(label, kind) for label, kind, _ in events] == [(0, "in"), (0, "out"), (1, "in"), (1, "out")]


def test_work_overlaps_but_never_with_a_timing():
    # shared holders are inside together
    log: list = []
    inside = [threading.Event() for _ in range(3)]
    done = threading.Event()
    workers = [_thread(H200_A, log, i, "shared", inside=inside[i], release=done) for i in range(3)]
    assert all(e.wait(WAIT_S) for e in inside)
    done.set()
    for t in workers:
        t.join()
    assert _most_inside(log) == 3

    assert _work_then_a_timing(H200_A) == [("work", "in"), ("work", "out"), ("timing", "in"), ("timing", "out")]


def _work_then_a_timing(hardware) -> list:
    """Work holds the slot shared; a timing asks for it exclusive meanwhile."""
    mixed: list = []
    inside, done = threading.Event(), threading.Event()
    work = _thread(hardware, mixed, "work", "shared", inside=inside, release=done)
    assert inside.wait(WAIT_S)
    timing = _thread(hardware, mixed, "timing", "exclusive")
    _timer_first_in_line(hardware)
    done.set()
    for t in (work, timing):
        t.join()
    return mixed


def test_a_waiting_timing_goes_before_work_that_arrives_after_it():
    log: list = []
    inside, done = threading.Event(), threading.Event()
    first = _thread(H200_A, log, "work-1", "shared", inside=inside, release=done)
    assert inside.wait(WAIT_S)
    timer = _thread(H200_A, log, "timing", "exclusive")
    _timer_first_in_line(H200_A)  # queued behind work-1
    late = _thread(H200_A, log, "work-2", "shared")  # arrives while the timer waits: it must not starve it
    done.set()
    for t in (first, timer, late):
        t.join()
    assert [label for label, kind in log if kind == "in"] == ["work-1", "timing", "work-2"]


def test_a_slot_switches_between_work_and_timing_and_counts_both():
    use = SlotUse()
    with gpu_slot(H200_A, use) as slot:
        slot.exclusive()
        slot.shared()
    with gpu_slot(H200_A, use):
        pass
    assert use.acquisitions == 3 and use.exclusive_acquisitions == 1
    assert 0.0 <= use.exclusive_s <= use.held_s


def test_a_slot_taken_later_holds_nothing_until_its_holders_first_shared_hold():
    # given a holder that enters the slot before its GPU work (a reference child building its models)
    use = SlotUse()
    with gpu_slot(H200_A, use, mode="later") as slot:
        # then a timer gets the GPU meanwhile, and no hold is counted
        assert not slot.holding and use.acquisitions == 0
        with gpu_slot(H200_A, mode="exclusive") as timer:
            assert timer.holding
        # and the first shared hold is the holder's own
        slot.shared()
        assert slot.holding and _held_by_another(H200_A, "lock")
    assert use.acquisitions == 1


def test_slot_names_are_safe_file_names():
    assert slot_name(H200_A) == "GPU-aaaa-1111"
    assert slot_name({"name": "NVIDIA H200/x", "gpu": {"index": 3}}) == "NVIDIA_H200_x-3"


def test_a_childs_gpu_is_counted_within_what_the_worker_was_given(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_device(0) == "2" and visible_device(1) == "3"
    with pytest.raises(RuntimeError, match="given only 2"):
        visible_device(2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_device(1) == "1"


def test_a_cap_on_shared_holders_is_kept_and_a_timer_still_gets_in(monkeypatch):
    monkeypatch.setenv("KERNELCOURT_GPU_SHARED_MAX", "2")
    # given two shared holders inside (the cap), three more holders and a timer arriving after them
    work: list = []
    inside = [threading.Event(), threading.Event()]
    done = threading.Event()
    first = [_thread(H200_A, work, i, "shared", inside=inside[i], release=done) for i in range(2)]
    assert inside[0].wait(WAIT_S) and inside[1].wait(WAIT_S)
    more = [_thread(H200_A, work, i, "shared") for i in range(2, 5)]
    timer: list = []
    timing = _thread(H200_A, timer, "timer", "exclusive")
    _timer_first_in_line(H200_A)
    # when the first two let go
    done.set()
    for t in first + more + [timing]:
        t.join()
    # then never three at once, and nothing shared while the timer timed
    assert _most_inside(work) == 2
    assert len(work) == 10 and timer == [("timer", "in"), ("timer", "out")]


def test_a_timer_waits_for_the_next_pause_point_not_the_end_of_the_work():
    """A holder that reaches pause points lets a waiting timing in there, then carries on shared."""
    log: list = []
    use = SlotUse()
    gap, queued = threading.Event(), threading.Event()

    def worker():
        with gpu_slot(H200_A, use) as slot:
            for step in range(8):  # 8 bursts of work, a pause point after each
                log.append(("work", "in"))
                log.append(("work", "out"))
                if step == 1:
                    gap.set()
                    assert queued.wait(WAIT_S)
                slot.pause_point()

    thread = threading.Thread(target=worker)
    thread.start()
    assert gap.wait(WAIT_S)
    timer = _thread(H200_A, log, "timer", "exclusive")
    _timer_first_in_line(H200_A)
    queued.set()
    for t in (thread, timer):
        t.join()
    assert _most_inside(log) == 1
    assert use.pauses == 1 and use.acquisitions == 1
    assert log.index(("timer", "in")) == 4  # after the second burst: the other six came after it
    assert len(log) == 18


def test_a_pause_point_without_a_waiting_timer_keeps_the_gpu():
    use = SlotUse()
    with gpu_slot(H200_A, use) as slot:
        assert not slot.timer_waiting()
        assert slot.pause_point() == 0.0
    assert use.pauses == 0 and use.acquisitions == 1


def test_cpu_timings_run_apart_from_other_evaluations_work():
    host = {"name": "AMD EPYC", "key": "cpu:AMD EPYC|torch|cuda-none"}
    assert _work_then_a_timing(host) == [("work", "in"), ("work", "out"), ("timing", "in"), ("timing", "out")]


def test_stretches_say_which_step_held_a_timer_back_and_a_release_lets_it_in_at_once():
    """Each stretch of a shared hold is kept under the step that ended it; a holder that lets the GPU
    go before CPU work alone lets a waiting timer in there, and takes the GPU back after it."""
    use, timer_use = SlotUse(), SlotUse()
    order: list[str] = []
    long_step, queued, timer_in = threading.Event(), threading.Event(), threading.Event()

    def holder():
        with gpu_slot(H200_A, use) as slot:
            slot.pause_point("short")
            long_step.set()
            assert queued.wait(WAIT_S)  # GPU work that the timer, queued now, waits for
            order.append("released")
            slot.release("long")
            assert timer_in.wait(WAIT_S)  # CPU work alone: the timer gets in meanwhile
            slot.shared()
            order.append("back")

    def timing():
        with gpu_slot(H200_A, timer_use, mode="exclusive"):
            order.append("timer")
            timer_in.set()

    thread = threading.Thread(target=holder)
    thread.start()
    assert long_step.wait(WAIT_S)
    timer = threading.Thread(target=timing)
    timer.start()
    _timer_first_in_line(H200_A)
    queued.set()
    for t in (thread, timer):
        t.join()
    assert set(use.stretches) == {"short", "long", "end"}
    assert order == ["released", "timer", "back"]  # in at the release; the holder came back after it
    assert timer_use.exclusive_wait_s > 0.0 and use.exclusive_wait_s == 0.0


def test_work_shut_out_by_a_timing_is_let_in_as_a_whole_before_the_next_timing():
    # given a timing in progress, two holders' work waiting behind it, and a second timer arriving then
    log: list = []
    inside, done = threading.Event(), threading.Event()
    first = _thread(H200_A, log, "timing-1", "exclusive", inside=inside, release=done)
    assert inside.wait(WAIT_S)
    work_in = [threading.Event(), threading.Event()]
    work_done = threading.Event()
    work = [_thread(H200_A, log, f"work-{i}", "shared", inside=work_in[i], release=work_done) for i in range(2)]

    _until(lambda: _shared_holds(H200_A, "waiting") == 2)  # each waiting holder holds the file shared
    second = _thread(H200_A, log, "timing-2", "exclusive")
    _until(lambda: _held_by_another(H200_A, "yield"))  # the second timer lets the waiting work in first
    # when the first timing ends
    done.set()
    for event in work_in:
        assert event.wait(WAIT_S)
    work_done.set()
    for t in (first, *work, second):
        t.join()
    # then both holders got in before the second timing, which ran alone after them
    entered = [label for label, kind in log if kind == "in"]
    assert entered[0] == "timing-1" and entered[-1] == "timing-2"
    assert sorted(entered[1:3]) == ["work-0", "work-1"]
    assert _most_inside(log) == 2


def test_a_holder_mid_stretch_is_stopped_for_a_waiting_timer_and_goes_on_after_it():
    """``step_aside``: the holder's child is stopped (not waited for), the timer gets the GPU at
    once, and the child is let go on only once the holder has the GPU shared again."""
    use = SlotUse()
    log: list = []
    timer_in, timer_go = threading.Event(), threading.Event()
    with gpu_slot(H200_A, use) as slot:
        # given no timer waiting: nothing is stopped
        assert slot.step_aside(lambda: log.append("stop"), lambda _held: log.append("resume")) == 0.0
        assert log == [] and use.stops == 0

        # when a timer queues while the holder's child is mid-stretch
        timer = _thread(H200_A, log, "timer", "exclusive", inside=timer_in, release=timer_go)
        _timer_first_in_line(H200_A)

        def stop():
            log.append("stop")
            return "held"

        def resume(held):
            assert held == "held" and slot.holding_shared  # the GPU is the holder's again first
            log.append("resume")

        aside = threading.Thread(target=slot.step_aside, args=(stop, resume))
        aside.start()
        assert timer_in.wait(WAIT_S)  # the timer is in while the child is stopped
        assert log == ["stop", ("timer", "in")]
        timer_go.set()
        for t in (aside, timer):
            t.join()
    # then the child went on after the timing, and the stop is counted
    assert log == ["stop", ("timer", "in"), ("timer", "out"), "resume"]
    assert use.stops == 1 and use.stopped_s > 0
    assert use.stretches.get("stopped") and use.acquisitions == 1


@pytest.mark.parametrize(("busy", "charged"), [([4242], True), ([77], False), (None, True)])
def test_a_stop_during_which_a_timer_found_the_childs_work_still_running_is_the_childs_own_time(busy, charged):
    """A timer that found the GPU busy after the holders stopped notes whose work it was; a stopped
    holder whose processes are named (or when nobody could be named) gets no excuse for that stop."""
    use = SlotUse()
    timer_in, noted = threading.Event(), threading.Event()

    def timer():
        with gpu_slot(H200_A, mode="exclusive") as alone:
            timer_in.set()
            alone.note_busy(set(busy) if busy is not None else None)
            noted.set()

    with gpu_slot(H200_A, use) as slot:
        thread = threading.Thread(target=timer)
        thread.start()
        _timer_first_in_line(H200_A)
        excused = slot.step_aside(lambda: [4242, 4243], lambda _held: None)
        thread.join()
    assert timer_in.is_set() and noted.is_set()
    assert use.stops == 1
    if charged:
        assert excused == 0.0 and use.charged_s > 0 and use.stopped_s == 0.0
    else:
        assert excused > 0 and use.stopped_s == excused and use.charged_s == 0.0
