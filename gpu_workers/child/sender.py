"""The child's side of the private channel: numbered, authenticated messages to the parent, its
go for timing, and the error text it is shown."""

from __future__ import annotations

import os
import traceback
from typing import Any

from ..sandbox.wire import read_message, write_message


def short_traceback(exc: BaseException, limit: int = 6000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


def is_build_error(exc: BaseException) -> bool:
    import subprocess

    if isinstance(exc, subprocess.CalledProcessError):
        return True
    text = str(exc)
    return "Error building extension" in text or "error: command" in text or "ninja: build stopped" in text


class Sender:
    """Numbered, authenticated messages on the private channel; the parent checks order and HMAC.

    The key and the serialiser are bound here, before any candidate code runs, and the sender lives
    only in main()'s locals, which the audit guard keeps out of the candidate's reach.
    """

    def __init__(self, fd: int, key: bytes | None, in_fd: int = -1):
        import torch

        self._fd = fd
        self._in_fd = in_fd
        self._key = key
        self._save = torch.save
        self._write = write_message
        self._read = os.read
        self._read_message = read_message
        self.seq = 0

    def __call__(self, phase: str, **payload: Any) -> None:
        self.seq += 1
        self._write(self._fd, {"phase": phase, "seq": self.seq, **payload}, self._key, self._save)

    def receive(self) -> Any:
        """The parent's next message on the private channel (a request of the trusted reference's
        comparison loop; never read by a candidate's judge)."""
        return self._read_message(self._in_fd)

    def _wait_go(self, why: str) -> None:
        if self._in_fd < 0 or self._read(self._in_fd, 1) != b"g":
            raise RuntimeError(f"the parent did not give its go {why}")

    def gpu_alone(self) -> None:
        """Ask the parent for the GPU to ourselves (a timing) and wait until it says go; until
        then other evaluations' work may be running on it (gpuslot)."""
        self("want_gpu")
        self._wait_go("for timing")

    def gpu_busy(self, drain: dict[str, Any]) -> None:
        """The GPU was ours but still busy with other processes' work (``timing.await_idle``): say so
        and wait for the parent's go, once it has let the GPU go and taken it back."""
        self("gpu_busy", drain=drain)
        self._wait_go("after 'gpu_busy'")

    def timing_begin(self, **payload: Any) -> None:
        """The timed loop starts now: say so and wait for the parent's go, so that the parent's
        view of the timing starts where the loop does (``pipeline.accounting.TimedSpan``)."""
        self("timing_begin", **payload)
        self._wait_go("to start timing")

    def round(self) -> bool:
        """A timing in alternation ended a round: say so and wait while the other side times one
        (``pipeline/pairing.py``); the parent's byte says whether to go on (``g``) or stop (``s``)."""
        self("round")
        byte = self._read(self._in_fd, 1) if self._in_fd >= 0 else b""
        if byte not in (b"g", b"s"):
            raise RuntimeError("the parent gave no word after a timing round")
        return byte == b"g"

    def pause(self, phase: str, **payload: Any) -> None:
        """A message sent at a pause point (all GPU work so far synchronised), then wait for the
        parent's go: meanwhile a timing of another evaluation may have the GPU (gpuslot)."""
        self(phase, **payload)
        self._wait_go(f"after {phase!r}")
