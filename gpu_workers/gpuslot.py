"""One evaluation's code on a GPU at a time, however many evaluations are in flight.

Timings are only honest when nothing else runs on the GPU: a neighbour's kernels steal SMs and
bandwidth (and a neighbour's baseline measured during our run would flatter us). Pools therefore
overlap what needs no GPU (compiling, starting a child and importing torch) and serialise what
does: a child is spawned first, and only when the evaluation holds its GPU's slot does it receive
its setup, so no task or candidate code runs outside the slot.

The slot is an exclusive ``flock`` on a file named after the GPU's UUID, so it holds across
threads (each acquisition opens its own descriptor), across worker processes (several Celery
workers on one node) and across Ray actors that see the same GPU under different indices.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .build import cache_root


@dataclass
class SlotUse:
    """Seconds waited for and held, summed over an evaluation's phases."""

    wait_s: float = 0.0
    held_s: float = 0.0
    acquisitions: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"wait_s": round(self.wait_s, 3), "held_s": round(self.held_s, 3), "acquisitions": self.acquisitions}


def exclusive() -> bool:
    return os.environ.get("KERNELARENA_GPU_EXCLUSIVE", "1") != "0"


def slot_name(hardware: dict[str, Any]) -> str:
    gpu = hardware.get("gpu") or {}
    ident = gpu.get("uuid") or f"{hardware.get('name', 'gpu')}-{gpu.get('index', 0)}"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", str(ident))[:120]


@contextmanager
def gpu_slot(device: str, hardware: dict[str, Any], use: SlotUse | None = None) -> Iterator[None]:
    """Hold the GPU for the block (a no-op on the CPU or with KERNELARENA_GPU_EXCLUSIVE=0)."""
    if device != "cuda" or not exclusive():
        yield
        return
    folder = cache_root() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"gpu-{slot_name(hardware)}.lock", os.O_CREAT | os.O_RDWR, 0o600)
    asked = time.monotonic()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        got = time.monotonic()
        try:
            yield
        finally:
            if use is not None:
                use.wait_s += got - asked
                use.held_s += time.monotonic() - got
                use.acquisitions += 1
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
