"""Whose work a GPU has lately run, as the driver's management library (NVML) sees it: read by a
parent that never initialises CUDA, so it can tell which stopped child's queued work held a timer
back (``gpuslot.GpuSlot.note_busy``). NVML is reached through ctypes (it ships with the driver);
where it is missing, or names no process of this machine's (another PID namespace), the answer is
None: unknown."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Any


class _Sample(ctypes.Structure):  # nvmlProcessUtilizationSample_t
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong), ("smUtil", ctypes.c_uint),
                ("memUtil", ctypes.c_uint), ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


_lock = threading.Lock()
_nvml: Any = None
_loaded = False


def _library() -> Any:
    global _nvml, _loaded
    with _lock:
        if not _loaded:
            _loaded = True
            try:
                library = ctypes.CDLL("libnvidia-ml.so.1")
                if library.nvmlInit_v2() == 0:
                    _nvml = library
            except (OSError, AttributeError):
                _nvml = None
        return _nvml


def _handle(nvml: Any, hardware: dict[str, Any]) -> ctypes.c_void_p | None:
    gpu = hardware.get("gpu") or {}
    handle = ctypes.c_void_p()
    uuid = str(gpu.get("uuid") or "")
    for name in (uuid, f"GPU-{uuid}") if uuid else ():
        if nvml.nvmlDeviceGetHandleByUUID(name.encode(), ctypes.byref(handle)) == 0:
            return handle
    count = ctypes.c_uint(0)
    if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0 and count.value == 1:
        if nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0:
            return handle
    return None


def process_samples(hardware: dict[str, Any], window_s: float = 1.0) -> list[tuple[int, int]] | None:
    """(pid, SM utilisation %) of each process NVML sampled on the GPU within the last ``window_s``
    seconds; None where NVML cannot say."""
    nvml = _library()
    if nvml is None:
        return None
    try:
        handle = _handle(nvml, hardware)
        if handle is None:
            return None
        since = ctypes.c_ulonglong(int((time.time() - window_s) * 1e6))
        count = ctypes.c_uint(0)
        nvml.nvmlDeviceGetProcessUtilization(handle, None, ctypes.byref(count), since)
        if count.value == 0:
            return []
        samples = (_Sample * count.value)()
        if nvml.nvmlDeviceGetProcessUtilization(handle, samples, ctypes.byref(count), since) != 0:
            return None
    except (OSError, AttributeError, ValueError):
        return None
    return [(int(s.pid), int(s.smUtil)) for s in samples[: count.value]]


def busy_pids(hardware: dict[str, Any], window_s: float = 1.0) -> set[int] | None:
    """Processes of this machine that NVML saw running work on the GPU's SMs within the last
    ``window_s`` seconds; None where that cannot be known."""
    samples = process_samples(hardware, window_s)
    if samples is None:
        return None
    pids = {pid for pid, sm in samples if sm > 0}
    if pids and not any(os.path.exists(f"/proc/{pid}") for pid in pids):
        return None  # NVML's process ids are another namespace's
    return pids
