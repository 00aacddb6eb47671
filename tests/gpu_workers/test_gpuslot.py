"""GPU slots: work overlaps, timings run alone, across threads and processes."""

from __future__ import annotations

import multiprocessing
import threading
import time

import pytest

from gpu_workers.hardware import visible_device
from gpu_workers.sandbox.gpuslot import SlotUse, gpu_slot, slot_name

H200_A = {"name": "NVIDIA H200", "gpu": {"index": 0, "uuid": "GPU-aaaa-1111"}}
H200_B = {"name": "NVIDIA H200", "gpu": {"index": 1, "uuid": "GPU-bbbb-2222"}}


def _hold(hardware, log, label, seconds=0.15, mode="exclusive"):
    with gpu_slot(hardware, mode=mode):
        log.append((label, "in", time.monotonic()))
        time.sleep(seconds)
        log.append((label, "out", time.monotonic()))


def _overlaps(log) -> bool:
    inside = 0
    for _, kind, _ in sorted(log, key=lambda e: e[2]):
        inside += 1 if kind == "in" else -1
        if inside > 1:
            return True
    return False


def test_timings_on_one_gpu_never_overlap_and_two_gpus_do():
    same: list = []
    threads = [threading.Thread(target=_hold, args=(H200_A, same, i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(same) == 8 and not _overlaps(same)

    both: list = []
    threads = [threading.Thread(target=_hold, args=(hw, both, i, 0.4)) for i, hw in enumerate([H200_A, H200_B])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert _overlaps(both)


def _hold_in_process(queue):
    with gpu_slot(H200_A, mode="exclusive"):
        queue.put(("in", time.monotonic()))
        time.sleep(0.3)
        queue.put(("out", time.monotonic()))


def test_the_slot_holds_across_worker_processes():
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_hold_in_process, args=(queue,)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
    events = [queue.get(timeout=5) for _ in range(4)]
    assert not _overlaps([(0, kind, at) for kind, at in events])


def test_work_overlaps_but_never_with_a_timing():
    log: list = []
    workers = [threading.Thread(target=_hold, args=(H200_A, log, i, 0.3, "shared")) for i in range(3)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert _overlaps(log)  # shared holders run together

    assert not _overlaps(_work_then_a_timing(H200_A))


def _work_then_a_timing(hardware) -> list:
    """Work holds the slot shared for 0.3 s; a timing asks for it exclusive 0.05 s in."""
    mixed: list = []
    threads = [threading.Thread(target=_hold, args=(hardware, mixed, "work", 0.3, "shared")),
               threading.Thread(target=_hold, args=(hardware, mixed, "timing", 0.2, "exclusive"))]
    threads[0].start()
    time.sleep(0.05)
    threads[1].start()
    for t in threads:
        t.join()
    return mixed


def test_a_waiting_timing_goes_before_work_that_arrives_after_it():
    log: list = []
    first = threading.Thread(target=_hold, args=(H200_A, log, "work-1", 0.4, "shared"))
    timer = threading.Thread(target=_hold, args=(H200_A, log, "timing", 0.2, "exclusive"))
    late = threading.Thread(target=_hold, args=(H200_A, log, "work-2", 0.1, "shared"))
    first.start()
    time.sleep(0.1)
    timer.start()  # queued behind work-1
    time.sleep(0.1)
    late.start()  # arrives while the timer waits: it must not starve the timer
    for t in (first, timer, late):
        t.join()
    entered = [label for label, kind, _ in sorted(log, key=lambda e: e[2]) if kind == "in"]
    assert entered == ["work-1", "timing", "work-2"]


def test_a_slot_switches_between_work_and_timing_and_counts_both(monkeypatch):
    use = SlotUse()
    with gpu_slot(H200_A, use) as slot:
        time.sleep(0.05)
        slot.exclusive()
        time.sleep(0.05)
        slot.shared()
    with gpu_slot(H200_A, use):
        pass
    assert use.acquisitions == 3 and use.exclusive_acquisitions == 1
    assert use.held_s >= 0.1 and 0.05 <= use.exclusive_s < use.held_s
    off = SlotUse()
    monkeypatch.setenv("KERNELCOURT_GPU_EXCLUSIVE", "0")
    with gpu_slot(H200_A, off) as slot:
        assert slot.exclusive() == 0.0 and slot.pause_point() == 0.0
    assert off.acquisitions == 0 and off.exclusive_acquisitions == 0


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


def _most_inside(log) -> int:
    inside = most = 0
    for _, kind, _ in sorted(log, key=lambda e: (e[2], e[1] == "in")):  # an exit before an entry at a tie
        inside += 1 if kind == "in" else -1
        most = max(most, inside)
    return most


def test_a_cap_on_shared_holders_is_kept_and_a_timer_still_gets_in(monkeypatch):
    monkeypatch.setenv("KERNELCOURT_GPU_SHARED_MAX", "2")
    work: list = []
    threads = [threading.Thread(target=_hold, args=(H200_A, work, i, 0.2, "shared")) for i in range(5)]
    for t in threads:
        t.start()
    time.sleep(0.05)
    timer: list = []
    timing = threading.Thread(target=_hold, args=(H200_A, timer, "timer", 0.1, "exclusive"))
    timing.start()
    for t in threads + [timing]:
        t.join()
    assert _most_inside(work) == 2  # two at once, never three
    assert len(work) == 10 and len(timer) == 2
    timer_in, timer_out = timer[0][2], timer[1][2]
    assert not any(timer_in < at < timer_out for _, _, at in work)  # nothing shared while it timed


def test_a_timer_waits_for_the_next_pause_point_not_the_end_of_the_work():
    """A holder that reaches pause points lets a waiting timing in there, then carries on shared."""
    log: list = []
    use = SlotUse()
    gap = threading.Event()

    def worker():
        with gpu_slot(H200_A, use) as slot:
            for step in range(8):  # 8 bursts of 0.1 s: the whole phase is 0.8 s
                log.append(("work", "in", time.monotonic()))
                time.sleep(0.1)
                log.append(("work", "out", time.monotonic()))
                if step == 1:
                    gap.set()
                slot.pause_point()

    thread = threading.Thread(target=worker)
    thread.start()
    gap.wait(5)
    with gpu_slot(H200_A, mode="exclusive") as timer:
        got = time.monotonic()
        log.append(("timer", "in", got))
        time.sleep(0.1)
        log.append(("timer", "out", time.monotonic()))
        assert not timer.timer_waiting()  # this timer no longer waits
    thread.join()
    assert not _overlaps(log)
    assert use.pauses == 1 and use.acquisitions == 1
    work_in = [at for label, kind, at in log if label == "work" and kind == "in"]
    assert sum(at > got for at in work_in) >= 3  # let in at a pause point: the rest of the work came after it


def test_a_pause_point_without_a_waiting_timer_keeps_the_gpu():
    use = SlotUse()
    with gpu_slot(H200_A, use) as slot:
        assert not slot.timer_waiting()
        assert slot.pause_point() == 0.0
    assert use.pauses == 0 and use.acquisitions == 1


def test_cpu_timings_run_apart_from_other_evaluations_work():
    host = {"name": "AMD EPYC", "key": "cpu:AMD EPYC|torch|cuda-none"}
    assert not _overlaps(_work_then_a_timing(host))


def test_stretches_say_which_step_held_a_timer_back_and_a_release_lets_it_in_at_once():
    """Each stretch of a shared hold is kept under the step that ended it; a holder that lets the GPU
    go before CPU work alone lets a waiting timer in there, and takes the GPU back after it."""
    use, timer_use = SlotUse(), SlotUse()
    times: dict[str, float] = {}
    long_step = threading.Event()

    def holder():
        with gpu_slot(H200_A, use) as slot:
            time.sleep(0.05)
            slot.pause_point("short")
            long_step.set()
            time.sleep(0.3)  # GPU work that a timer arriving now must wait for
            times["released"] = time.monotonic()  # before: the timer may get in before release returns
            slot.release("long")
            time.sleep(0.2)  # CPU work alone: the timer runs meanwhile
            slot.shared()
            times["back"] = time.monotonic()

    thread = threading.Thread(target=holder)
    thread.start()
    long_step.wait(5)
    with gpu_slot(H200_A, timer_use, mode="exclusive"):
        times["timer"] = time.monotonic()
        time.sleep(0.3)
    thread.join()
    assert set(use.stretches) == {"short", "long", "end"}
    assert use.stretches["short"][0] < 0.3 <= use.stretches["long"][0]
    assert times["released"] <= times["timer"] < times["released"] + 0.15  # in at the release
    assert times["back"] >= times["timer"] + 0.3  # the holder came back after the timing
    assert timer_use.exclusive_wait_s >= 0.2 and use.exclusive_wait_s == 0.0
    assert use.to_dict()["stretches"]["long"] == use.stretches["long"]


def test_an_evaluation_keeps_each_stretch_by_its_step_and_lets_the_slot_go_for_cpu_work(kernelcourt_cache_dir):
    """The stretches an evaluation held its device shared, by the step that ended them: every pause
    point of both children is one, the reference's outputs travel with the slot let go (the stretch
    after them ends at its done), and the candidate's exit is outside the slot."""
    from pathlib import Path

    from gpu_workers import EvalRequest, evaluate

    task = (Path(__file__).resolve().parent / "hacks" / "tasks" / "scale_relu.py").read_text()
    kernel = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return torch.relu(x * 1.5 + 0.25)\n")
    result = evaluate(EvalRequest(task_source=task, kernel_source=kernel, device="cpu", track="open",
                                  baselines=("eager",), timing_budget_s=0.1, trials=3, run_timeout_s=60.0))
    assert result.status == "passed", result.message
    stretches = result.timing_stats["gpu_slot"]["stretches"]
    assert {"reference: models", "reference: outputs", "reference: done", "candidate: prepared",
            "candidate: imported", "candidate: built", "candidate: ready", "candidate: timing_outputs",
            "candidate: after", "candidate: done"} <= set(stretches)
    assert len(stretches["candidate: trial"]) == 3 and len(stretches["reference: trial"]) == 3
    assert "candidate: exit" not in stretches and "reference: reference" not in stretches
    assert all(s >= 0 for values in stretches.values() for s in values)
