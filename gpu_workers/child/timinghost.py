"""The host side of a timing: how the timing thread waits on the GPU and which CPUs it runs on.

Imported by ``measure`` before any candidate code, like everything the judge relies on: the driver's
functions and the affinity calls are bound here once.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence

import torch

try:  # the CUDA driver, for how this process waits on the GPU while it times (SpinWaits)
    _driver = ctypes.CDLL("libcuda.so.1")
    _ctx_get_flags, _ctx_set_flags = _driver.cuCtxGetFlags, _driver.cuCtxSetFlags  # CUDA 12.1 and later
    _c_uint, _byref = ctypes.c_uint, ctypes.byref
except (OSError, AttributeError):
    _ctx_get_flags = _ctx_set_flags = None
CU_CTX_SCHED_MASK, CU_CTX_SCHED_SPIN = 0x07, 0x01
_get_affinity = getattr(os, "sched_getaffinity", None)
_set_affinity = getattr(os, "sched_setaffinity", None)
_os_open, _pread, _close = os.open, os.pread, os.close


class SpinWaits:
    """While timing on CUDA, this process's context spins while it waits on the GPU instead of
    yielding its core (CUDA's default once contexts outnumber cores, as with many evaluations at
    once): a device-wide synchronize then returns within a microsecond of the GPU going idle, not
    whenever the scheduler gives the core back, which is what made end-to-end medians of short
    kernels wander under host load. The context's own flags are restored afterwards. Without the
    driver's ``cuCtxSetFlags`` (before CUDA 12.1) it changes nothing; ``mode`` says which."""

    def __init__(self, device: torch.device, enabled: bool = True):
        self.device = device
        self.enabled = enabled
        self.mode = "default"
        self._saved: int | None = None

    def __enter__(self) -> SpinWaits:
        if not self.enabled or self.device.type != "cuda" or _ctx_set_flags is None:
            return self
        flags = _c_uint(0)
        if _ctx_get_flags(_byref(flags)) != 0:
            return self
        if _ctx_set_flags(_c_uint((flags.value & ~CU_CTX_SCHED_MASK) | CU_CTX_SCHED_SPIN)) == 0:
            self._saved, self.mode = flags.value, "spin"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None:
            _ctx_set_flags(_c_uint(self._saved))
            self._saved = None


def context_sched_flags() -> int | None:
    """The current CUDA context's scheduling flags (CU_CTX_SCHED_*), or None without a driver/context."""
    if _ctx_get_flags is None:
        return None
    flags = _c_uint(0)
    return flags.value & CU_CTX_SCHED_MASK if _ctx_get_flags(_byref(flags)) == 0 else None


class TimingCpus:
    """This thread runs on ``cpus`` while it times (the GPU's own NUMA node: KERNELCOURT_TIMING_CPUS),
    then on what it had; nothing when ``cpus`` is empty or cannot be had."""

    def __init__(self, cpus: Sequence[int] | None):
        self.cpus = set(cpus or ())
        self._saved: set[int] | None = None

    def __enter__(self) -> TimingCpus:
        if self.cpus and _get_affinity is not None and _set_affinity is not None:
            try:
                saved = _get_affinity(0)
                if self.cpus & saved:
                    _set_affinity(0, self.cpus & saved)
                    self._saved = saved
            except OSError:
                self._saved = None
        return self

    def __exit__(self, *exc: object) -> None:
        if self._saved is not None and _set_affinity is not None:
            _set_affinity(0, self._saved)
            self._saved = None


def host_cpu() -> int | None:
    """The CPU this thread is running on now (/proc/thread-self/stat, field 39), or None."""
    try:
        with open("/proc/thread-self/stat", encoding="ascii") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


class ThreadWaits:
    """The calling thread's time runnable but waiting for a CPU, as the kernel accounts it
    (``/proc/thread-self/schedstat``, opened once and read in place). On the CPU a timed window's
    reported time holds whatever the thread waited inside it, so the parent's count of the waits
    over the whole span (``accounting.TimedSpan``) holds those twice; what the windows waited is
    reported beside the times (``window_waits_ms``, judge.outside_waits_ms). A reader that cannot
    open the file, or was not enabled (CUDA, whose reported times are the GPU's), reads None."""

    def __init__(self, enabled: bool = True) -> None:
        self._fd = -1
        if enabled:
            try:
                self._fd = _os_open("/proc/thread-self/schedstat", os.O_RDONLY)
            except OSError:
                pass

    def seconds(self) -> float | None:
        if self._fd < 0:
            return None
        try:
            return int(_pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return None

    def __enter__(self) -> ThreadWaits:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd >= 0:
            _close(self._fd)
            self._fd = -1
