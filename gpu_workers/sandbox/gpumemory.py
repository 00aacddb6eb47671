"""GPU memory admission: an evaluation starts its GPU work only once its GPU has room for what it
announced (its reference's and its candidate's bytes, with a margin), and a CUDA out-of-memory that
a neighbour caused is an infrastructure fault to retry, never a verdict on the kernel or the task.

The ledger of one GPU is a small JSON file beside the GPU slot's locks (``<cache>/locks``), read and
written under an ``flock``: it holds across threads, worker processes and Ray actors on one node, as
the slot does. An entry belongs to a process; entries of processes that no longer exist are dropped
at the next read, so a worker killed mid-evaluation never holds memory it no longer uses.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Room left free on top of every announcement: allocator rounding, cuDNN/cuBLAS workspaces, the
# contexts themselves (about 0.5 GiB each on an H200).
DEFAULT_MARGIN = 0.10
CONTEXT_BYTES = 600 << 20

_OOM_PATTERNS = (
    r"CUDA out of memory", r"OutOfMemoryError", r"CUBLAS_STATUS_ALLOC_FAILED", r"cudaErrorMemoryAllocation",
    r"CUDNN_STATUS_ALLOC_FAILED", r"CUDNN_STATUS_NOT_ENOUGH_WORKSPACE", r"out of memory.*\bcuda\b",
    r"CUDA error: out of memory",
)
_OOM = re.compile("|".join(_OOM_PATTERNS), re.IGNORECASE)


class DoesNotFit(RuntimeError):
    """What the evaluation announced is more than the GPU could ever hold."""


def is_cuda_oom(text: str) -> bool:
    """Whether a child's error or log says a CUDA allocation failed (torch's OutOfMemoryError, or a
    library's allocation status)."""
    return bool(text) and _OOM.search(text) is not None


def classify_oom(text: str, announced_bytes: int, admitted: bool) -> str | None:
    """Who a CUDA out-of-memory is on: ``"neighbour"`` when the evaluation was admitted for what it
    announced (its room was reserved, so another process took it: retry as infrastructure), ``"own"``
    when it was not admitted through the ledger or announced nothing (its own allocations are
    unaccounted: its verdict stands); None when the text is no CUDA out-of-memory."""
    if not is_cuda_oom(text):
        return None
    return "neighbour" if admitted and announced_bytes > 0 else "own"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Admission:
    """One evaluation's reservation on a GPU (``GpuLedger.admit``)."""

    token: str
    nbytes: int
    waited_s: float
    admitted: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.nbytes, "waited_s": round(self.waited_s, 3)}


class GpuLedger:
    """The announced bytes of the evaluations running on one GPU, against its capacity."""

    def __init__(self, name: str, capacity_bytes: int, folder: Path, margin: float = DEFAULT_MARGIN,
                 poll_s: float = 0.05):
        if capacity_bytes <= 0:
            raise ValueError("a GPU's capacity must be positive")
        self.name = name
        self.capacity = int(capacity_bytes)
        self.usable = int(capacity_bytes * (1.0 - margin))
        folder.mkdir(parents=True, exist_ok=True)
        self._path = folder / f"gpu-{name}.ledger.json"
        self._lock_path = folder / f"gpu-{name}.ledger.lock"
        self._poll_s = poll_s
        self._changed = threading.Condition()  # wakes this process's waiters at once on a release

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        fd = os.open(self._lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                entries = json.loads(self._path.read_text())
                if not isinstance(entries, dict):
                    entries = {}
            except (OSError, ValueError):
                entries = {}
            entries = {k: v for k, v in entries.items()
                       if isinstance(v, dict) and _alive(int(v.get("pid", 0))) and int(v.get("bytes", 0)) >= 0}
            yield entries
            temporary = self._path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(entries))
            os.replace(temporary, self._path)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def held(self) -> int:
        """Bytes reserved now, by every live process."""
        with self._locked() as entries:
            return sum(int(v["bytes"]) for v in entries.values())

    def try_admit(self, nbytes: int) -> Admission | None:
        """Reserve ``nbytes`` if they fit beside what is held now; None otherwise. An announcement
        larger than the whole usable GPU raises DoesNotFit. An empty GPU admits anything that fits."""
        nbytes = max(int(nbytes), 0)
        if nbytes > self.usable:
            raise DoesNotFit(f"the evaluation announced {nbytes} bytes; the GPU has {self.capacity} "
                             f"({self.usable} usable with the margin)")
        with self._locked() as entries:
            if sum(int(v["bytes"]) for v in entries.values()) + nbytes > self.usable:
                return None
            token = secrets.token_hex(8)
            entries[token] = {"pid": os.getpid(), "bytes": nbytes, "since": time.time()}
        return Admission(token=token, nbytes=nbytes, waited_s=0.0)

    def release(self, admission: Admission) -> None:
        with self._locked() as entries:
            entries.pop(admission.token, None)
        with self._changed:
            self._changed.notify_all()

    def admit(self, nbytes: int, timeout_s: float, on_wait: Callable[[], None] | None = None) -> Admission:
        """Wait until ``nbytes`` fit, then reserve them. ``on_wait`` is called once, when the first
        try finds no room. Raises TimeoutError after ``timeout_s`` and DoesNotFit at once."""
        began = time.monotonic()
        deadline = began + timeout_s
        told = False
        while True:
            admission = self.try_admit(nbytes)
            if admission is not None:
                admission.waited_s = time.monotonic() - began
                return admission
            if not told and on_wait is not None:
                on_wait()
            told = True
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"the GPU had no room for {nbytes} bytes within {timeout_s:g} s "
                                   f"({self.held()} of {self.usable} held)")
            with self._changed:  # a release in this process wakes at once; other processes' are polled
                self._changed.wait(min(self._poll_s, left))

    @contextmanager
    def reserved(self, nbytes: int, timeout_s: float,
                 on_wait: Callable[[], None] | None = None) -> Iterator[Admission]:
        admission = self.admit(nbytes, timeout_s, on_wait)
        try:
            yield admission
        finally:
            self.release(admission)


HOLD_BYTES = 1 << 30  # the candidate's judge keeps its recent private input copies up to this (child/candidate.py)


def evaluation_bytes(task_bytes: dict[str, Any], kept: int, fp64: bool = True) -> dict[str, int]:
    """What one evaluation's children hold on the GPU at once, at most, from the task's own bytes
    (measured on the meta device: ``tasksize``): P parameters, I inputs, O outputs, and a forward's
    working set W: I and the most its own tensors held at once (``working_bytes``: a deep network's
    activations), at least I + O. Every input set is made when it is needed and dropped after
    (isolation.JustInTime), so one set is live at a time.

    * reference: both weight configurations (2P, and 4P more in float64), the set and its private
      copy, and during the float64 run its float64 copy (4I), the outputs in fp32 and fp64 (3O: the
      device comparison holds both beside the candidate's mapped answer), the working set in fp64
      (2W); without float64, 2P + 2I + 2O + W; and the copies its baselines' timing makes of the
      outputs the candidate keeps whole (``kept`` × O, as the candidate's loop does);
    * candidate: its models (2P), the private copy of the set and the judge's two snapshots of it
      (3I), the output, the judge's clone of it, a second read of it and the first trial's answer
      kept for the determinism check (4O), the working set, the timed outputs it keeps whole
      (``kept`` × O) and its recent private copies (up to HOLD_BYTES).
    """
    inputs = int(task_bytes.get("input_bytes", 0))
    outputs = int(task_bytes.get("output_bytes", 0))
    params = int(task_bytes.get("parameter_bytes", 0))
    work = inputs + max(outputs, int(task_bytes.get("working_bytes") or 0))
    if fp64:
        reference = 6 * params + 4 * inputs + (3 + kept) * outputs + 2 * work + CONTEXT_BYTES
    else:
        reference = 2 * params + 2 * inputs + (2 + kept) * outputs + work + CONTEXT_BYTES
    candidate = (2 * params + 3 * inputs + (4 + kept) * outputs + work + min(HOLD_BYTES, inputs)
                 + CONTEXT_BYTES)
    return {"reference": reference, "candidate": candidate, "total": reference + candidate}


def host_bytes(task_bytes: dict[str, Any], trials: int, kept: int, device: str,
               on_device: bool = False) -> dict[str, int]:
    """What one evaluation holds in host memory, from the task's own bytes: ``child``, each child at
    most (on the CPU everything an evaluation holds is host memory, as ``evaluation_bytes`` counts it
    for one child, beside the outputs it reports; on a GPU the outputs it reports (the reference
    every trial's in fp32 and fp64, each kept timed set's, the one after timing; none where outputs
    are compared on the device, ``on_device``) and the parameters: both children build their models
    on the CPU before moving them, so the candidate holds the two configurations' state dicts it was
    sent while one model of its own is on the host, three times the parameters; the reference's
    state dicts are its models' own CPU tensors, two), and ``reported``, the outputs the children
    send, which the parent holds once they have arrived."""
    inputs = int(task_bytes.get("input_bytes", 0))
    outputs = int(task_bytes.get("output_bytes", 0))
    params = int(task_bytes.get("parameter_bytes", 0))
    # compared on a GPU, outputs never reach a host; on the CPU they are host memory either way
    reported = 0 if on_device and device != "cpu" else (3 * trials + kept + 2) * outputs
    if device == "cpu":
        each = evaluation_bytes(task_bytes, kept)
        held = max(each["reference"], each["candidate"]) - CONTEXT_BYTES + reported
    else:
        held = reported + 3 * params + 2 * inputs
    return {"child": held, "reported": reported}


def host_limit_mb(task_bytes: dict[str, Any], trials: int, kept: int, device: str, on_device: bool = False,
                  floor_mb: int = 4096) -> int:
    """A child's memory limit (RSS; the address space too on the CPU): twice what it holds
    (``host_bytes``) with a floor for the interpreter, torch and the compilers: a bound that follows
    the task, not a flat 16 GiB."""
    held = host_bytes(task_bytes, trials, kept, device, on_device)["child"]
    return max(floor_mb, int(2 * held) >> 20)
