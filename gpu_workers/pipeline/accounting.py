"""Where an evaluation's time and CPU went, kept with every result that got past the static checks:
the timeline of its phases and messages, CPU seconds by who spent them, the parent's own view of a
child's timing window, and the GPU slot's use."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..sandbox import process as sandbox
from ..sandbox.gpuslot import SlotUse

PROGRESS = logging.getLogger("gpu_workers.progress")  # every mark as it happens, for who listens


class Timeline:
    """Seconds since the evaluation began at which each phase and child message arrived (kept with
    the result: where an evaluation's time went). Each mark is also logged as it happens (at DEBUG,
    on ``gpu_workers.progress``, under ``name``), so an evaluation still running, or cut off, shows
    where it is."""

    def __init__(self, started: float, name: str = ""):
        self._started = started
        self._name = name
        self.events: list[list[Any]] = []

    def mark(self, label: str) -> None:
        at = round(time.monotonic() - self._started, 3)
        self.events.append([label, at])
        PROGRESS.debug("%s %.3f %s", self._name, at, label)


class CpuUse:
    """CPU seconds an evaluation cost, by who spent them (kept with the result: what sizes a node).
    Children are read from /proc just after their last report (the compile child with its compilers;
    the candidate's exit and a fresh child's fork are not in it); a reference child kept between
    evaluations counts only what it did for this one. ``parent``: this process's threads working for
    the evaluation (decoding the children's messages, starting children), ``judge`` the verdict."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, who: str, seconds: float | None) -> None:
        if seconds is not None and seconds >= 0:
            with self._lock:
                self.seconds[who] = self.seconds.get(who, 0.0) + seconds

    def to_dict(self) -> dict[str, float]:
        with self._lock:
            out = {k: round(v, 3) for k, v in self.seconds.items()}
        if out:
            out["total"] = round(sum(out.values()), 3)
        return out


class TimedSpan:
    """The parent's own view of a child's timing, from its ``timing_begin`` (where the child waits
    for the parent's go, so the view starts exactly where the loop does) to its ``timing_end``
    (after which the child waits again): the wall-clock milliseconds, and how many of them the
    child's timing thread spent waiting for a CPU (runnable, not running: a busy host's doing, which
    no GPU work and no forged timer explains).

    The parent's own clock reads the end late whenever this process is busy (its other evaluations'
    threads, the interpreter's lock): tens to hundreds of milliseconds on a full GPU node. The
    kernel's accounting of the child's thread is read at both ends while the child waits, so it
    does not move meanwhile: where the thread never blocked in between (a CUDA timing spins while it
    waits on the GPU, a CPU timing computes), its time on a CPU and waiting for one is the span's
    wall-clock time to the microsecond. A thread that blocked (``BLOCK_ALLOWANCE`` beyond the wait
    for the go) could hide time from that account, so then the parent's clock stands: it errs only
    long."""

    BLOCK_ALLOWANCE = 2

    def __init__(self, child: sandbox.Child):
        self._pid = child.proc.pid
        self._clock = sandbox.thread_clock(self._pid)
        self._began = time.monotonic()
        self.detail: dict[str, Any] = {}

    def end(self, extra_blocks: int = 0, paused_ms: float = 0.0) -> tuple[float, float | None]:
        """``extra_blocks``: waits the protocol itself put inside the span (a paired timing's rounds,
        each a wait for the parent's word: ``pipeline/pairing.py``), allowed beside the others;
        ``paused_ms``: how long, by the parent's clock, it held its word back meanwhile (the other
        side's rounds), which its own clock then leaves out (it errs long only by the messages'
        latency, the child's wait being longer than the parent's hold)."""
        parent_ms = max((time.monotonic() - self._began) * 1e3 - max(paused_ms, 0.0), 0.0)
        clock = sandbox.thread_clock(self._pid)
        if clock is None or self._clock is None:
            self.detail = {"parent_ms": parent_ms, "source": "parent"}
            return parent_ms, None
        on_cpu, waiting, blocked = (b - a for a, b in zip(self._clock, clock, strict=True))
        thread_ms, waited_ms = (on_cpu + waiting) * 1e3, min(max(waiting * 1e3, 0.0), parent_ms)
        # the go it waited for at the start was counted before the first reading; the wait after
        # timing_end is counted in the second
        trusted = blocked <= 1 + self.BLOCK_ALLOWANCE + max(extra_blocks, 0) and thread_ms <= parent_ms
        self.detail = {"parent_ms": parent_ms, "thread_ms": thread_ms, "blocked": blocked,
                       "source": "thread" if trusted else "parent"}
        return (thread_ms if trusted else parent_ms), waited_ms


def progress(slot: SlotUse, timeline: Timeline, cpu: CpuUse, budget: dict[str, Any]) -> dict[str, Any]:
    """Where the evaluation's time went, kept with every result that got past the static checks, and
    what it was allowed (its task's sizing, memory limits and GPU admission: tasks/budget.py)."""
    return {"gpu_slot": slot.to_dict(), "timeline": timeline.events, "cpu_s": cpu.to_dict(), **budget}
