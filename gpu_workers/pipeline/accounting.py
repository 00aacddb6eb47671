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
    """The parent's own view of a child's timing, from its ``timing_begin`` to its ``timing_end``:
    the wall-clock milliseconds, and how many of them the child's timing thread spent waiting for a
    CPU (runnable, not running: a busy host's doing, which no GPU work and no forged timer explains)."""

    def __init__(self, child: sandbox.Child):
        self._pid = child.proc.pid
        self._began = time.monotonic()
        self._delay = sandbox.run_delay_seconds(self._pid)

    def end(self) -> tuple[float, float | None]:
        wall_ms = (time.monotonic() - self._began) * 1e3
        delay = sandbox.run_delay_seconds(self._pid)
        waited = (delay - self._delay) * 1e3 if delay is not None and self._delay is not None else None
        return wall_ms, (min(max(waited, 0.0), wall_ms) if waited is not None else None)


def progress(slot: SlotUse, timeline: Timeline, cpu: CpuUse, budget: dict[str, Any]) -> dict[str, Any]:
    """Where the evaluation's time went, kept with every result that got past the static checks, and
    what it was allowed (its task's sizing, memory limits and GPU admission: tasks/budget.py)."""
    return {"gpu_slot": slot.to_dict(), "timeline": timeline.events, "cpu_s": cpu.to_dict(), **budget}
