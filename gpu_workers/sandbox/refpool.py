"""Reference children kept between evaluations.

The reference child runs only trusted code (the task's ``Model`` and ``get_inputs``), so unlike a
candidate it need not be a fresh process each time. Starting one costs a CUDA context (0.2 s alone,
1–2 s when many evaluations share a GPU and its driver) and a torch warm-up, on every evaluation's
path. A reference child that finished an evaluation cleanly waits for the next setup instead of
exiting, and the next evaluation with the same environment (GPU, threads, caches) in this worker
process borrows it.

A child is given back only after a clean run (its ``done`` came); any failure, timeout or protocol
break closes it. It is retired after ``MAX_USES`` evaluations or once its resident memory passes
half of its limit, so growth from one task never reaches another's limit. Between evaluations it
holds no GPU slot and runs nothing; it frees its cached GPU memory before reporting ``done``.
``KERNELCOURT_REFERENCE_REUSE=0`` starts a fresh reference child every time.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from typing import Any

from . import process as sandbox
from .gpuslot import SlotUse, gpu_slot

MAX_USES = 64
_IDLE: dict[tuple[Any, ...], list[sandbox.Child]] = {}
_USES: dict[int, int] = {}  # id(child) -> evaluations served
_LOCK = threading.Lock()


def enabled() -> bool:
    return os.environ.get("KERNELCOURT_REFERENCE_REUSE", "1") != "0"


def _key(env_extra: dict[str, str], memory_limit_mb: int) -> tuple[Any, ...]:
    # the worker process too: a forked worker must not talk to its parent's children
    return (os.getpid(), memory_limit_mb, tuple(sorted(env_extra.items())),
            tuple(sorted(sandbox.scrubbed_env().items())))


def borrow(env_extra: dict[str, str], memory_limit_mb: int) -> tuple[sandbox.Child, bool]:
    """A reference child for one evaluation, and whether it kept running from an earlier one."""
    if enabled():
        key = _key(env_extra, memory_limit_mb)
        while True:
            with _LOCK:
                idle = _IDLE.get(key)
                child = idle.pop() if idle else None
            if child is None:
                break
            if child.alive():
                child.start_log_here()
                return child, True
            _retire(child)
    return sandbox.spawn("reference", env_extra=env_extra, memory_limit_mb=memory_limit_mb), False


def prestart(env_extra: dict[str, str], memory_limit_mb: int, count: int, device: str,
             hardware: dict[str, Any], timeout_s: float = 120.0) -> int:
    """Start ``count`` reference children and keep them idle for this worker process's first
    evaluations (a worker's warm-up): each makes its CUDA context on ``device`` (a device string, or
    "cpu") with the GPU held shared, and runs no task code. Returns how many are kept; a child that
    fails to warm is closed."""
    if not enabled() or count <= 0:
        return 0
    children = [sandbox.spawn("reference", env_extra=env_extra, memory_limit_mb=memory_limit_mb)
                for _ in range(count)]
    kept = 0
    with gpu_slot(hardware, SlotUse()):
        for child in children:
            child.send({"warm": device})
        deadline = time.monotonic() + timeout_s
        for child in children:
            try:
                warm = child.recv(deadline).get("phase") == "warm"
            except sandbox.ChildError:
                warm = False
            if warm:
                give_back(child, env_extra, memory_limit_mb, clean=True)
                kept += 1
            else:
                _retire(child)
    return kept


def give_back(child: sandbox.Child, env_extra: dict[str, str], memory_limit_mb: int, clean: bool) -> None:
    """After the evaluation: keep a child that ended cleanly for the next one, close any other."""
    uses = _USES.get(id(child), 0) + 1
    limit = child.memory_limit_bytes
    keep = (clean and enabled() and uses < MAX_USES and child.alive()
            and not (limit and sandbox.rss_bytes(child.proc.pid) > limit // 2))
    if not keep:
        _retire(child)
        return
    with _LOCK:
        _USES[id(child)] = uses
        _IDLE.setdefault(_key(env_extra, memory_limit_mb), []).append(child)


def _retire(child: sandbox.Child) -> None:
    _USES.pop(id(child), None)
    child.close(wait_s=0)


def idle_pids() -> set[int]:
    """Process IDs of this worker process's reference children waiting for an evaluation."""
    with _LOCK:
        return {c.proc.pid for key, idle in _IDLE.items() if key[0] == os.getpid() for c in idle}


def close_all() -> None:
    """Close every idle reference child of this process (at exit; tests)."""
    with _LOCK:
        children = [c for key, idle in _IDLE.items() if key[0] == os.getpid() for c in idle]
        for key in [k for k in _IDLE if k[0] == os.getpid()]:
            del _IDLE[key]
    for child in children:
        _retire(child)


atexit.register(close_all)
