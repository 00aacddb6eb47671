"""Measurement primitives used inside the children: the judge's own bound functions, guards,
poisoning and output snapshots (the timing loop itself is ``timing.py``).

This module is imported, and binds every function it relies on, BEFORE any candidate code is
imported (REWARD_HACKS family 7). The candidate may later replace ``time.perf_counter`` or
``torch.cuda.Event.elapsed_time``; the judge keeps calling the originals bound here, and
``patched_attributes()`` reports any replacement.
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
import time
import types
from collections.abc import Sequence
from typing import Any

import torch

# ---- functions bound before candidate import ----------------------------------------------
_perf_counter = time.perf_counter
_sleep = time.sleep
_tensor_clone = torch.Tensor.clone
_tensor_detach = torch.Tensor.detach
_tensor_copy = torch.Tensor.copy_
_tensor_to = torch.Tensor.to
_tensor_zero = torch.Tensor.zero_
_tensor_fill = torch.Tensor.fill_
_tensor_amax = torch.Tensor.amax
_torch_equal = torch.equal
_torch_empty = torch.empty
_listdir = os.listdir
_cuda_sync = torch.cuda.synchronize
_Event = torch.cuda.Event
_event_record = torch.cuda.Event.record
_event_sync = torch.cuda.Event.synchronize
_event_elapsed = torch.cuda.Event.elapsed_time
_cuda_spin = getattr(torch.cuda, "_sleep", None)
# Attributes whose replacement is a measurement hack, wherever the candidate does it.
_WATCHED: tuple[tuple[Any, str], ...] = tuple(
    (owner, name)
    for owner, names in (
        (time, ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic", "monotonic_ns",
                "process_time", "sleep")),
        (torch, ("allclose", "isclose", "equal", "empty", "empty_like", "manual_seed", "save", "load",
                 "randn", "rand", "zeros", "clone")),
        (torch.testing, ("assert_close",)),
        (torch.cuda, ("synchronize", "Event", "current_stream", "default_stream", "Stream",
                      "elapsed_time" if hasattr(torch.cuda, "elapsed_time") else "synchronize")),
        (torch.cuda.Event, ("record", "synchronize", "elapsed_time", "query", "wait")),
        (torch.Tensor, ("clone", "detach", "copy_", "to", "cpu", "zero_", "fill_", "__eq__", "data_ptr",
                        "contiguous", "sum", "abs", "float", "double", "numpy", "tolist", "item")),
        (os, ("write", "read", "_exit", "listdir", "getpid")),
        (sys, ("exit",)),
        (builtins, ("isinstance", "type", "len", "print", "open")),
        (threading, ("active_count", "enumerate")),
    )
    for name in names
    if hasattr(owner, name)
)
_ORIGINALS: dict[tuple[int, str], Any] = {(id(owner), name): getattr(owner, name) for owner, name in _WATCHED}
_disable_dynamo = getattr(torch, "_disable_dynamo", None)


def _dynamo_rebinding(now: Any, original: Any) -> bool:
    """Whether ``now`` is the wrapper torch._dynamo puts around ``original`` when it is first imported
    (torch.compile imports it; it rebinds torch.manual_seed so): no patch. The snapshot is taken
    without importing dynamo (over a second per child); the wrapper is recognised exactly: the code
    and globals of torch's own ``_disable_dynamo`` wrapper, closing over the original and nothing
    else callable."""
    if _disable_dynamo is None or not isinstance(now, types.FunctionType) or not callable(original):
        return False
    probe = _disable_dynamo(_perf_counter)
    if now.__code__ is not probe.__code__ or now.__globals__ is not probe.__globals__:
        return False
    try:
        cells = [cell.cell_contents for cell in now.__closure__ or ()]
    except ValueError:  # an empty cell: not torch's wrapper
        return False
    return any(c is original for c in cells) and all(c is original or not callable(c) for c in cells)


_MODULE_SNAPSHOTS: dict[str, dict[str, int]] = {}


def watch_modules(prefix: str) -> None:
    """Remember every global of the judge's own modules (functions, bound primitives, constants)."""
    for name, module in list(sys.modules.items()):
        if module is not None and (name == prefix or name.startswith(prefix + ".")):
            _MODULE_SNAPSHOTS[name] = {key: id(value) for key, value in vars(module).items()}


def patched_attributes() -> list[str]:
    """Names of watched functions that no longer are the ones bound at start."""
    changed = []
    for name, snapshot_ids in _MODULE_SNAPSHOTS.items():
        module = sys.modules.get(name)
        current = vars(module) if module is not None else {}
        for key, ident in snapshot_ids.items():
            if key not in current or id(current[key]) != ident:
                changed.append(f"{name}.{key}")
    for owner, name in _WATCHED:
        now, original = getattr(owner, name, None), _ORIGINALS[(id(owner), name)]
        if now is not original and not _dynamo_rebinding(now, original):
            label = getattr(owner, "__name__", type(owner).__name__)
            where = getattr(now, "__module__", None) or type(now).__name__
            changed.append(f"{label}.{name} (now {where}.{getattr(now, '__qualname__', '?')})")
    if sys.gettrace() is not None:
        changed.append("sys.settrace (a trace function is installed)")
    if sys.getprofile() is not None:
        changed.append("sys.setprofile (a profile function is installed)")
    return changed


# ---- the process's threads and children ----------------------------------------------------
def thread_count() -> int:
    try:
        return len(_listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def child_pids() -> set[int]:
    pids: set[int] = set()
    try:
        for tid in _listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/children", encoding="ascii") as handle:
                    pids.update(int(p) for p in handle.read().split())
            except OSError:
                continue
    except OSError:
        pass
    return pids


# ---- devices -------------------------------------------------------------------------------
def synchronize(device: torch.device) -> None:
    """Device-wide: waits for every stream, so side-stream work is inside the measurement."""
    if device.type == "cuda":
        _cuda_sync(device)


_max_reserved = torch.cuda.max_memory_reserved  # taken at import, before any candidate code runs
_max_allocated = torch.cuda.max_memory_allocated
_empty_cache = torch.cuda.empty_cache


def release_gpu_cache(device: torch.device) -> None:
    """Give the caching allocator's free blocks back to the driver before this child waits while the
    other child of its evaluation works on the same GPU: what it freed would otherwise stay reserved
    beside the other's work, which the announcement counts apart (a candidate held 56.7 GiB against
    36 GB announced while its reference fingerprinted the timed sets of level1/4, 8.6 GB each, and the
    reference ran out of memory)."""
    if device.type == "cuda":
        synchronize(device)
        _empty_cache()


def gpu_peak_bytes() -> dict[str, int] | None:
    """The most GPU memory this process's caching allocator held (``reserved``: what its neighbours
    could not have) and had in tensors (``allocated``) since its counts were last reset; None where
    this process has not used CUDA. What its evaluation announced is measured against these
    (``timing_stats["memory"]["peak"]``)."""
    if not torch.cuda.is_initialized():
        return None
    return {"reserved": int(_max_reserved()), "allocated": int(_max_allocated())}


class Poisoner:
    """Fills free allocator memory with NaN so `empty()` cannot return a stale right answer."""

    def __init__(self, device: torch.device, nbytes: int):
        self.device = device
        self.numel = max(1 << 16, nbytes // 4)

    def poison(self) -> None:
        block = _torch_empty(self.numel, dtype=torch.float32, device=self.device)
        _tensor_fill(block, float("nan"))
        synchronize(self.device)
        del block  # back to the caching allocator (CUDA) or the heap (CPU, see tune_cpu_heap)


def _libc() -> Any:
    """glibc, or None where it cannot be loaded (the heap's policy is then the system's)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def tune_cpu_heap() -> None:
    """Keep large CPU blocks on glibc's heap instead of fresh zeroed mmaps, so poison sticks."""
    libc = _libc()
    m_trim_threshold, m_mmap_threshold = -1, -3
    try:
        libc.mallopt(m_mmap_threshold, 1 << 30)
        libc.mallopt(m_trim_threshold, 1 << 31)
    except AttributeError:  # no glibc (or none loaded): the system's policy
        pass


def release_cpu_heap() -> None:
    """Give the heap's free memory back to the system (``malloc_trim``): under ``tune_cpu_heap`` a
    process keeps what it freed, and a reference child kept for the next evaluation would carry the
    last one's peak into a task whose memory limit is smaller."""
    try:
        _libc().malloc_trim(0)
    except AttributeError:  # no glibc (or none loaded)
        pass


# ---- outputs -------------------------------------------------------------------------------
def flatten(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        items: list[Any] = []
        for item in value:
            items.extend(flatten(item))
        return items
    return [value]


def clone_leaf(value: Any) -> Any:
    """A detached copy of a tensor (the judge's own clone, bound at start); anything else as it is."""
    return _tensor_clone(_tensor_detach(value)) if type(value) is torch.Tensor else value


def snapshot(value: Any) -> list[Any]:
    """Detached copies of every tensor leaf."""
    return [clone_leaf(v) for v in flatten(value)]


def elements_spanned(tensor: torch.Tensor) -> int:
    """How many elements of its storage a non-empty strided tensor reaches from its first one."""
    return 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))


def has_storage(tensor: torch.Tensor) -> bool:
    """True when the tensor's storage really holds every element it claims to have."""
    if tensor.numel() == 0:
        return True
    needed = (tensor.storage_offset() + elements_spanned(tensor)) * tensor.element_size()
    try:
        return tensor.untyped_storage().nbytes() >= needed
    except (RuntimeError, NotImplementedError):
        return False


def to_cpu(leaves: Sequence[Any]) -> list[Any]:
    out = []
    for leaf in leaves:
        if type(leaf) is torch.Tensor:
            out.append(_tensor_to(_tensor_detach(leaf), "cpu", copy=True).contiguous())
        elif isinstance(leaf, int | float | bool) or leaf is None:
            out.append(leaf)
        else:
            out.append(repr(type(leaf)))
    return out


def same_values(a: Sequence[Any], b: Sequence[Any]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if type(x) is not type(y) or (isinstance(x, torch.Tensor) and type(x) is not torch.Tensor):
            if x is not y:  # never call into a candidate's Tensor subclass to compare it
                return False
            continue
        if type(x) is torch.Tensor:
            if x.shape != y.shape or x.dtype != y.dtype or not _torch_equal(x, y):
                both_nan = torch.isnan(x) & torch.isnan(y) if x.is_floating_point() else None
                if both_nan is None or not _torch_equal(torch.where(both_nan, 0, x), torch.where(both_nan, 0, y)):
                    return False
        elif x != y:
            return False
    return True
