"""Honest timings on a shared GPU: work overlaps, timing runs alone.

A neighbour's kernels steal SMs and bandwidth, so a timing is only honest when nothing else runs on
the GPU; but most of an evaluation's GPU work (making inputs, the reference outputs, correctness
trials) may overlap with other evaluations' work. Each GPU therefore has a readers-writer lock:

- an evaluation's children run their GPU work holding it *shared* (many at once);
- before a timing (the candidate's, or a baseline's) the child asks its parent, which takes it
  *exclusive* and only then lets the child start; afterwards it goes back to shared.

The CPU evaluator uses the same lock, one per host: a timing there runs apart from other
evaluations' reference and candidate work (their compiles are not held back), so a baseline cached
for a task and a candidate timed later are not measured under unlike loads from the evaluator itself.

A turnstile gives a waiting timer priority: while one waits, no new shared holder enters, so the
holders drain and the timer gets the GPU. Work shut out by timings is let in as a whole between
them: a timer that arrives while shared holders are waiting (behind another timing) first lets
them in (they hold the ``waiting`` file shared while they wait; the timer waits, up to
``YIELD_MAX_S``, until none does). Without that, after each timing only the few holders that won
the race for the turnstile got in before the next timer closed it, and on a busy GPU (16
evaluations of KernelBench tasks on an H200) the GPU ran about one evaluation's work at a time
between timings: 1.8 holders on average, and a median 103 s of each evaluation spent waiting. Let in
together, the holders' CPU work overlaps and the next timer drains them all at once; queued timers
still run back to back. Holders need not drain whole phases: a child reports
*pause points* (its GPU work so far synchronised, e.g. after each correctness trial) and waits there
for its parent's go; at each one the parent steps aside if a timer is waiting (``pause_point``:
a waiting timer holds the ``want`` file shared, so a non-blocking exclusive try shows it) and takes
the GPU back, shared, after the timing. A timer so waits for the next pause point of each holder, not
for the end of its phase. ``KERNELCOURT_GPU_SHARED_MAX=K`` caps the shared holders
of one GPU at K (a shared holder first takes one of K seats): without MPS, every process on a GPU
gets time slices of it in turn, so many concurrent holders each run slower and a timer waits longer
for them to drain. Unset or 0: no cap.

A timer waits for no holder's stretch: while a parent waits for a message from a child that works
under a shared hold, it looks every few milliseconds whether a timer waits, and if so stops the
child's whole process tree (SIGSTOP, which no candidate can catch), lets the GPU go, takes it back
shared after the timing and lets the child go on (``step_aside``, ``process.Child.yield_to_timers``);
the time it stood still is not counted against the child's bounds. On the H200 the stretches between
pause points were seconds long (a reference building its models, a candidate's construction), and a
timer waited for the longest in progress: 2-4 s per timing, three timings an evaluation, one timer
after another, which held 16 workers to about 5 KernelBench evaluations a minute. What a stopped
child queued on the GPU before the stop still runs, so on CUDA a timing first waits on the device
until the GPU has drained (``child.timing.await_idle``); pause points remain where the child's
work is synchronised anyway, and the holder steps aside there without stopping anything.

The locks are ``flock``s on files named after the GPU's UUID, so they hold across threads (each
acquisition opens its own descriptors), across worker processes (several Celery workers on one node)
and across Ray actors that see the same GPU under different indices. A child is spawned first and
receives its setup only once its evaluation holds the lock, so no task or candidate code touches the
GPU outside it.

No stretch may hold the GPU for long: each stretch of a candidate between pause points, and its
timing, has a bound (``hold_bound``: the reference's own time for the same work times
``HOLD_FACTOR``, never less than the settings' ``gpu_hold_floor_s``); past it the parent kills the
child (the evaluation's status is ``timeout``) and lets the GPU go. A stopped child's stretch does
not run on while it stands still, unless a timer found its queued GPU work still running
(``note_busy``): so a kernel that never returns is ended by that bound, and a waiting timer waits at
most that long for it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..build.toolchain import cache_root
from ..settings import current


@dataclass
class SlotUse:
    """Seconds waited for and held (shared or exclusive), summed over an evaluation's phases."""

    wait_s: float = 0.0
    held_s: float = 0.0
    exclusive_s: float = 0.0
    acquisitions: int = 0
    exclusive_acquisitions: int = 0
    pauses: int = 0  # pause points at which a waiting timer was let in
    stops: int = 0  # times a child was stopped mid-stretch to let a waiting timer in (``step_aside``)
    stopped_s: float = 0.0  # ... and the seconds it stayed stopped
    # stopped seconds counted as the child's own: its queued GPU work ran on (note_busy)
    charged_s: float = 0.0
    busy_notes: int = 0  # times this holder's timing found the GPU still busy and let it go
    exclusive_wait_s: float = 0.0  # of wait_s, waited as a timer (for the holders to drain)
    # Each stretch of a shared hold without a pause point, by the step that ended it: a waiting
    # timer waits for the longest stretch in progress, so these say which steps hold timings back.
    stretches: dict[str, list[float]] = field(default_factory=dict)
    # The stretch that ran past its bound (the child was killed there): the step after which it
    # began, its bound and whether it held the GPU alone.
    overrun: dict[str, Any] | None = None

    def stretch(self, step: str, seconds: float) -> None:
        self.stretches.setdefault(step, []).append(round(seconds, 3))

    def to_dict(self) -> dict[str, Any]:
        return {"wait_s": round(self.wait_s, 3), "held_s": round(self.held_s, 3),
                "exclusive_s": round(self.exclusive_s, 3), "acquisitions": self.acquisitions,
                "exclusive_acquisitions": self.exclusive_acquisitions, "pauses": self.pauses,
                "stops": self.stops, "stopped_s": round(self.stopped_s, 3),
                "charged_s": round(self.charged_s, 3), "busy_notes": self.busy_notes,
                "exclusive_wait_s": round(self.exclusive_wait_s, 3),
                "stretches": {step: list(values) for step, values in self.stretches.items()},
                "overrun": dict(self.overrun) if self.overrun else None}


BUSY_KEEP_S = 600.0  # how long a note that a timer found the GPU busy is kept (stops are shorter)
YIELD_MAX_S = 10.0  # a timer lets waiting work in first for at most this long (a bound, not a wait)
_YIELD_POLL_S = 0.001

HOLD_FACTOR = 50.0  # a candidate's stretch may take this many times the reference's time for its work


def hold_bound(reference_s: float, calls: int = 1, extra_s: float = 0.0, floor_s: float = 120.0) -> float:
    """Seconds a stretch of ``calls`` forward calls may hold the GPU: ``HOLD_FACTOR`` times the
    reference's time for one (its slowest correctness trial, fp32 and fp64 forwards and the copies
    to the CPU), at least the floor, plus ``extra_s`` (a timing's budget, a deferred build)."""
    return max(floor_s, HOLD_FACTOR * max(reference_s, 0.0) * calls) + extra_s


def shared_max() -> int:
    """At most this many evaluations' children work on one GPU at once (0: no cap)."""
    return current().gpu_shared_max


def slot_name(hardware: dict[str, Any]) -> str:
    gpu = hardware.get("gpu") or {}
    ident = gpu.get("uuid") or f"{hardware.get('name', 'gpu')}-{gpu.get('index', 0)}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(ident))[:120]


class GpuSlot:
    """One evaluation phase's hold on its device (a GPU, or the CPU host): shared for work,
    exclusive for timing."""

    def __init__(self, hardware: dict[str, Any], use: SlotUse | None = None):
        self.active = True
        self.use = use if use is not None else SlotUse()
        self._lock = self._turnstile = self._want = self._waiting = self._yield = -1
        self._seats: list[int] = []
        self._name = ""
        self._seat = -1  # the seat descriptor held while shared, when seats are capped
        self._mode = 0  # 0: none, LOCK_SH or LOCK_EX
        self._since = 0.0
        self._stretch_since = 0.0  # when the current stretch of a shared hold began
        if self.active:
            folder = cache_root() / "locks"
            folder.mkdir(parents=True, exist_ok=True)
            name = self._name = slot_name(hardware)
            self._lock = os.open(folder / f"gpu-{name}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            self._turnstile = os.open(folder / f"gpu-{name}.turnstile", os.O_CREAT | os.O_RDWR, 0o600)
            self._want = os.open(folder / f"gpu-{name}.want", os.O_CREAT | os.O_RDWR, 0o600)
            self._waiting = os.open(folder / f"gpu-{name}.waiting", os.O_CREAT | os.O_RDWR, 0o600)
            self._yield = os.open(folder / f"gpu-{name}.yield", os.O_CREAT | os.O_RDWR, 0o600)
            self._seats = [os.open(folder / f"gpu-{name}.seat{i}", os.O_CREAT | os.O_RDWR, 0o600)
                           for i in range(shared_max())]

    def _take_seat(self) -> None:
        """One of the K seats, before the turnstile (a seat holder never blocks a timer)."""
        if not self._seats:
            return
        for seat in self._seats:
            try:
                fcntl.flock(seat, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self._seat = seat
                return
            except BlockingIOError:
                continue
        seat = self._seats[(os.getpid() * 31 + threading.get_ident()) % len(self._seats)]
        fcntl.flock(seat, fcntl.LOCK_EX)
        self._seat = seat

    def _drop_seat(self) -> None:
        if self._seat >= 0:
            fcntl.flock(self._seat, fcntl.LOCK_UN)
            self._seat = -1

    def _let_waiting_work_in(self) -> None:
        """Before queueing as a timer: while shared holders wait (shut out by another timing), wait
        until they are in (bounded by ``YIELD_MAX_S``), holding ``yield`` shared meanwhile (what the
        tests and an operator see). ``want`` is not held yet, so no holder pauses for this timer."""
        fcntl.flock(self._yield, fcntl.LOCK_SH)
        try:
            deadline = time.monotonic() + YIELD_MAX_S
            while True:
                try:
                    fcntl.flock(self._waiting, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        return
                    time.sleep(_YIELD_POLL_S)
                    continue
                fcntl.flock(self._waiting, fcntl.LOCK_UN)
                return
        finally:
            fcntl.flock(self._yield, fcntl.LOCK_UN)

    def _take(self, mode: int) -> float:
        asked = time.monotonic()
        if mode == fcntl.LOCK_SH:
            self._take_seat()
            fcntl.flock(self._waiting, fcntl.LOCK_SH)  # a timer arriving now lets this one in first
        else:
            self._let_waiting_work_in()
            fcntl.flock(self._want, fcntl.LOCK_SH)  # holders see a timer waiting at their next pause point
        try:
            fcntl.flock(self._turnstile, fcntl.LOCK_EX)  # behind any timer already waiting
            try:
                fcntl.flock(self._lock, mode)
            finally:
                fcntl.flock(self._turnstile, fcntl.LOCK_UN)
        finally:
            fcntl.flock(self._want if mode == fcntl.LOCK_EX else self._waiting, fcntl.LOCK_UN)
        got = time.monotonic()
        self.use.wait_s += got - asked
        if mode == fcntl.LOCK_EX:
            self.use.exclusive_wait_s += got - asked
        self._mode, self._since = mode, got
        self._stretch_since = got
        return got - asked

    def _end_stretch(self, step: str) -> None:
        if self._mode == fcntl.LOCK_SH:
            now = time.monotonic()
            self.use.stretch(step, now - self._stretch_since)
            self._stretch_since = now

    def _drop(self, step: str = "end") -> None:
        self._end_stretch(step)
        if self._mode:
            held = time.monotonic() - self._since
            self.use.held_s += held
            if self._mode == fcntl.LOCK_EX:
                self.use.exclusive_s += held
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._mode = 0
        self._drop_seat()

    def shared(self) -> float:
        """Hold the GPU for work that may overlap with other evaluations' work; returns seconds waited."""
        if not self.active or self._mode == fcntl.LOCK_SH:
            return 0.0
        self._drop()
        self.use.acquisitions += 1
        return self._take(fcntl.LOCK_SH)

    def exclusive(self) -> float:
        """Hold the GPU alone (a timing); returns seconds waited."""
        if not self.active or self._mode == fcntl.LOCK_EX:
            return 0.0
        self._drop("alone")  # flock cannot upgrade in place: leave, then queue as a timer
        self.use.exclusive_acquisitions += 1
        return self._take(fcntl.LOCK_EX)

    def step_aside(self, stop: Callable[[], list[int]], resume: Callable[[list[int]], None]) -> float:
        """Mid-stretch, the holder's child still at work: if a timer waits, ``stop()`` the child (its
        processes, SIGSTOP; it returns their ids), let the GPU go, take it back shared after the
        timing, then ``resume`` them. A timer so waits for no holder's stretch to end. What the
        child queued on the GPU before it stopped still runs: the timer waits on the device until
        that has drained (``child.timing.await_idle``), and if it does not drain, the timer lets
        the GPU go (``note_busy``). Returns the seconds the child was stopped that are not its own
        (0: no timer waited): all of them, unless a timer found the GPU busy meanwhile with this
        child's work (or with work nobody could name), for then the stop did not stop it."""
        if not self.active or self._mode != fcntl.LOCK_SH or not self.timer_waiting():
            return 0.0
        began = time.monotonic()
        held = stop()
        try:
            self._drop("stopped")
            self.use.stops += 1
            self._take(fcntl.LOCK_SH)
        finally:
            resume(held)
        stopped = time.monotonic() - began
        if self._busy_with(held, began):
            self.use.charged_s += stopped
            return 0.0
        self.use.stopped_s += stopped
        return stopped

    def note_busy(self, pids: set[int] | None) -> None:
        """A timer found the GPU still at work after the holders had stopped (``await_idle`` ran past
        its bound): keep when, and whose work it was (``gpuactivity.busy_pids``; None: unknown), so
        the stopped holders' parents count the stop against their child where it was theirs."""
        if not self.active:
            return
        with self._busy_file() as events:
            now = time.monotonic()
            events[:] = [e for e in events if now - float(e["at"]) < BUSY_KEEP_S]
            events.append({"at": now, "pids": sorted(pids) if pids is not None else None})
        self.use.busy_notes += 1

    def _busy_with(self, pids: list[int], since: float) -> bool:
        with self._busy_file() as events:
            return any(float(e["at"]) >= since and (e["pids"] is None or set(e["pids"]) & set(pids))
                       for e in events)

    @contextmanager
    def _busy_file(self) -> Iterator[list[dict[str, Any]]]:
        path = cache_root() / "locks" / f"gpu-{self._name}.busy"
        handle = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            raw = os.pread(handle, 1 << 20, 0)
            try:
                events = json.loads(raw) if raw else []
            except ValueError:
                events = []
            before = list(events)
            yield events
            if events != before:
                data = json.dumps(events).encode()
                os.ftruncate(handle, 0)
                os.pwrite(handle, data, 0)
        finally:
            os.close(handle)

    @property
    def holding_shared(self) -> bool:
        """Whether this holder has the GPU shared now (its child may be at work on it)."""
        return self.active and self._mode == fcntl.LOCK_SH

    @property
    def holding(self) -> bool:
        """Whether this holder has the GPU now (always, where no slot is kept)."""
        return not self.active or self._mode != 0

    def timer_waiting(self) -> bool:
        """Whether some timing waits for this GPU (in any thread or process)."""
        if not self.active:
            return False
        try:
            fcntl.flock(self._want, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._want, fcntl.LOCK_UN)
        return False

    def pause_point(self, step: str = "pause") -> float:
        """Called where the holder's GPU work so far is finished (after ``step``): if a timer waits,
        step aside and take the GPU back (shared) after it; returns seconds waited (0 when nothing
        waited)."""
        if not self.active or self._mode != fcntl.LOCK_SH:
            return 0.0
        if not self.timer_waiting():
            self._end_stretch(step)
            return 0.0
        self._drop(step)
        self.use.pauses += 1
        return self._take(fcntl.LOCK_SH)

    def release(self, step: str) -> None:
        """Let the GPU go where the holder's GPU work so far is finished and CPU work alone follows
        (a large message, say); ``shared()`` takes it back before the next GPU work."""
        if self.active:
            self._drop(step)

    def close(self) -> None:
        if self.active:
            self._drop()
            for handle in (self._lock, self._turnstile, self._want, self._waiting, self._yield, *self._seats):
                os.close(handle)
            self.active = False


@contextmanager
def gpu_slot(hardware: dict[str, Any], use: SlotUse | None = None, mode: str = "shared") -> Iterator[GpuSlot]:
    """Hold the device for the block, shared or exclusive, or from the holder's first ``shared()``
    (``later``); the slot can switch modes inside the block."""
    slot = GpuSlot(hardware, use)
    try:
        if mode == "exclusive":
            slot.exclusive()
        elif mode != "later":
            slot.shared()
        yield slot
    finally:
        slot.close()
