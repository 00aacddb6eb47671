"""A host-bound candidate timed in alternation with its eager baseline: the reference child kept
through the candidate phase (``reference.Checker``) times the eager baseline again while the
candidate times, a round each (``timing.time_callable``'s ``on_round``), both on one CPU.

Why: a host-bound forward's time is the host's speed, and on the lent GPU machines (virtual, 16
vCPUs) that speed drifts by up to 1.8x over seconds, the same process slow for a stretch and fast
after (docs/evaluator.md). A baseline kept from an earlier evaluation, or timed a few seconds
before the candidate, met another stretch than the candidate did; timed in alternation, in rounds
of tens to hundreds of milliseconds on the same CPU, both sides meet the same ones, as the plain
method's one process timing both models does.

The candidate's process never times its baseline: the trusted reference child does, and the
candidate's own figures face the same checks as an unpaired timing (its rounds' waits are no part
of its timing: ``accounting.TimedSpan``'s allowance, ``BLOCKS_PER_ROUND``). Nothing of the
candidate runs while the reference times: its judge synchronises the whole device before it ends a
round, its process tree is stopped (SIGSTOP) for the reference's round, and the reference starts
each round only once the GPU has no other process's work (``timing.time_callable``'s
``idle_rounds``; work still running ends the pairing, never in the candidate's favour: its result
is then set against the kept baseline, as unpaired)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import judge
from ..sandbox import process as sandbox
from ..sandbox.gpuslot import GpuSlot
from .accounting import TimedSpan, Timeline
from .reference import Checker, let_busy_go

# Waits a candidate's timing thread may make for each round: for the parent's word, once more
# after the stop (SIGSTOP) it was given while it waited, and once for the interpreter's lock when its
# other threads wake with it (the strict track's watch): 11 for 5 rounds on the CPU on the open
# track, 14 on strict. Past them the parent's own clock stands, less the time it held its word back.
BLOCKS_PER_ROUND = 3


class Pairing:
    """The parent's side: the candidate's timing has said ``timing_begin``; ``begin`` starts the
    reference's paired timing and lets it time its first round; each of the candidate's ``round``
    messages gets ``turn``: the reference times a round, then the candidate's word to go on or stop;
    ``end`` (at the candidate's ``timing_end``) stops the reference and returns its baseline entry.
    Any failure on the reference's side ends the pairing, never the candidate's timing: its rounds
    then go on at once, and its result is set against the kept baseline as unpaired."""

    def __init__(self, checker: Checker, candidate: sandbox.Child, gpu: GpuSlot, hardware: dict[str, Any],
                 timeline: Timeline, every: int, timeout_s: float, cpu: int | None):
        self._checker, self._child, self._candidate = checker, checker.child, candidate
        self._gpu, self._hardware, self._timeline = gpu, hardware, timeline
        self._every, self._timeout_s = every, timeout_s
        self._cpu = cpu
        self._saved: dict[int, set[int]] = {}
        self.live = False  # the reference is inside its paired timing
        self.rounds = 0  # rounds the reference timed
        self.candidate_cpu_ns = 0  # what the candidate's threads ran while the reference timed
        self._round_at: float | None = None  # when the reference's last round ended
        self._held_s = 0.0  # how long the reference waited for the parent's word between its rounds
        self.error: str | None = None
        self._span: TimedSpan | None = None
        self.entry: dict[str, Any] | None = None

    def _pin(self) -> None:
        """Both timing threads (each process's main thread) on the pair's one CPU until ``unpin``."""
        if self._cpu is None:
            return
        for pid in (self._child.proc.pid, self._candidate.proc.pid):
            try:
                self._saved[pid] = os.sched_getaffinity(pid)
                os.sched_setaffinity(pid, {self._cpu})
            except OSError:
                self._saved.pop(pid, None)

    def unpin(self) -> None:
        for pid, cpus in self._saved.items():
            try:
                os.sched_setaffinity(pid, cpus)
            except OSError:
                pass
        self._saved.clear()

    def _go(self, word: bytes) -> None:
        """The reference's word after a round: how long it waited for it is no part of its timing."""
        if self._round_at is not None:
            self._held_s += time.monotonic() - self._round_at
            self._round_at = None
        self._child.signal(word)

    def _recv(self) -> dict[str, Any]:
        return self._child.recv(time.monotonic() + self._timeout_s)

    def _fail(self, why: str) -> None:
        self.live = False
        self.error = why
        self._timeline.mark("pairing: off")

    def _broken(self, why: str) -> None:
        """The reference left the protocol mid-timing: ended, so none of its work runs beside the
        candidate's timing (what the candidate phase still asks of it fails as the reference's)."""
        self._checker.broke()
        self._child.kill()
        self._fail(why)

    def _until_round(self) -> None:
        """Read the reference's messages until it ends a round (``round``) or its timing
        (``paired``); the GPU let go and taken back where it found the GPU still busy."""
        went = time.monotonic()
        while True:
            try:
                message = self._recv()
            except sandbox.ChildError as exc:
                self._broken(f"the reference child failed its paired timing ({exc.kind})")
                return
            phase = message.get("phase")
            if phase == "gpu_busy":
                let_busy_go(self._gpu, self._child, self._hardware, self._timeline, "reference", trusted=True,
                            since=went)
                went = time.monotonic()
                continue
            if phase == "timing_begin":  # its warm-up is over: its timed loop starts with this go
                self._span = TimedSpan(self._child)
                self._child.signal()
                continue
            if phase == "round":
                self.rounds += 1
                self._round_at = time.monotonic()
                return
            if phase == "paired":
                self._finish(message.get("stats"))
                return
            if phase == "pair_failed":
                self._fail("the eager baseline failed its paired timing: " + str(message.get("error"))[-500:])
                return
            self._broken(f"the reference child answered {phase!r} during its paired timing")
            return

    def _finish(self, stats: Any) -> None:
        self.live = False
        if type(stats) is not dict or self._span is None:
            self._fail("the reference's paired timing ended without its figures")
            return
        wall, waited = self._span.end(extra_blocks=self.rounds, paused_ms=self._held_s * 1e3)
        # the parent's clock over a paired timing, net of its holds, errs long by the messages of every
        # round: where the kernel's account of the reference's thread did not stand, no loop cost of its
        # own (judge.timer_finding takes the kept timing's; a kept sample's comes from the others)
        thread = (self._span.detail or {}).get("source") == "thread"
        self.entry = {"stats": stats, "wall_ms": wall, "descheduled_ms": waited, "span": self._span.detail,
                      "overhead_ms_per_iter": judge.loop_cost_ms(wall, waited, stats) if thread else None,
                      "paired": {"rounds": self.rounds, "every": self._every, "cpu": self._cpu}}
        self._timeline.mark("reference: paired")

    def begin(self) -> None:
        """The candidate waits at its ``timing_begin``: the reference warms up and times its first round."""
        self._pin()
        self._checker.child.send({"pair": self._every})
        self.live = True
        self._timeline.mark("pairing: begin")
        with self._candidate_stopped():
            self._until_round()

    def turn(self) -> bytes:
        """The candidate ended a round: the reference times one; the byte for the candidate (``g``:
        go on; ``s``: stop, the reference's timing is over and each of its rounds matched, so no
        more rounds are paired)."""
        if not self.live:
            return b"s" if self.entry is not None else b"g"
        with self._candidate_stopped():
            self._go(b"g")
            self._until_round()
        # it timed a round, perhaps its last (a side stops only after a round it timed, in place of
        # the round's word: timing.time_callable): the candidate times the round that matches it,
        # and at that round's end, with the reference's timing over, it is told to stop
        return b"g"

    @contextmanager
    def _candidate_stopped(self) -> Iterator[None]:
        """The candidate's whole process tree stopped while the reference times: none of its threads
        may take the pair's CPU or launch GPU work then. What CPU its threads used meanwhile is kept
        (``candidate_cpu_ms``: the stop's own evidence, nothing but the stop's delivery)."""
        held = self._candidate.stop_tree()
        before = sandbox.process_cpu_ns(self._candidate.proc.pid)
        try:
            yield
        finally:
            after = sandbox.process_cpu_ns(self._candidate.proc.pid)
            if before is not None and after is not None:
                self.candidate_cpu_ns += max(after - before, 0)
            self._candidate.continue_tree(held)

    def end(self) -> dict[str, Any] | None:
        """The candidate's timing is over: the reference's stops at its round's end. Returns the
        paired eager baseline's entry (None where the pairing failed)."""
        try:
            while self.live:
                self._go(b"s")
                self._until_round()
        finally:
            self.unpin()
        if self.entry is not None:
            self.entry["paired"]["candidate_cpu_ms"] = self.candidate_cpu_ns / 1e6
        return self.entry

