"""Measurement primitives used inside the children: timing, poisoning, guards.

This module is imported, and binds every function it relies on, BEFORE any candidate code is
imported (REWARD_HACKS family 7). The candidate may later replace ``time.perf_counter`` or
``torch.cuda.Event.elapsed_time``; the judge keeps calling the originals bound here, and
``patched_attributes()`` reports any replacement.
"""

from __future__ import annotations

import builtins
import os
import statistics
import sys
import threading
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from .timinghost import SpinWaits, TimingCpus, host_cpu

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
CYCLES_PER_MS = 2_000_000  # GPU clock cycles in a millisecond (about 2 GHz)
SPIN_CYCLES = CYCLES_PER_MS  # the longest spin before a kernel-side timing (~1 ms)
MIN_SPIN_CYCLES = CYCLES_PER_MS // 10  # the shortest (~0.1 ms)
SETTLE_MIN_ITERS = 100  # a median's confidence interval is read from this many timed iterations on
SETTLE_EVERY = 25  # ... every this many
EVENT_RESOLUTION_MS = 0.001  # a median known to ±1 µs is known (CUDA events resolve ~0.5 µs)
ROUND_TRIP_EVERY = 4  # an empty iteration (round_trip_ms) after every this many timed ones, on CUDA

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


def tune_cpu_heap() -> None:
    """Keep large CPU blocks on glibc's heap instead of fresh zeroed mmaps, so poison sticks."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 1 << 30)
        libc.mallopt(m_trim_threshold, 1 << 31)
    except (OSError, AttributeError):
        pass


class L2Flusher:
    """Empties the L2 of the timed work's data between iterations (CUDA only): writes a buffer twice
    the L2's size, then reads it. The read matters: after a write pass the L2 is full of dirty lines,
    and the timed kernel's first misses would pay for writing them back (several µs of a short
    kernel, which Nsight Compute, flushing a clean cache, does not see)."""

    def __init__(self, device: torch.device):
        self.buffer = None
        if device.type == "cuda":
            l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or (64 << 20)
            self.buffer = _torch_empty(2 * l2 // 4, dtype=torch.int32, device=device)

    def flush(self) -> None:
        if self.buffer is not None:
            _tensor_zero(self.buffer)
            _tensor_amax(self.buffer)  # the write-backs happen here, outside the timing


# ---- outputs -------------------------------------------------------------------------------
def flatten(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        items: list[Any] = []
        for item in value:
            items.extend(flatten(item))
        return items
    return [value]


def snapshot(value: Any) -> list[Any]:
    """Detached copies of every tensor leaf (the judge's own clone, bound at start)."""
    return [_tensor_clone(_tensor_detach(v)) if type(v) is torch.Tensor else v for v in flatten(value)]


def has_storage(tensor: torch.Tensor) -> bool:
    """True when the tensor's storage really holds every element it claims to have."""
    if tensor.numel() == 0:
        return True
    extent = 1 + sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride()))
    needed = (tensor.storage_offset() + extent) * tensor.element_size()
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


# ---- timing --------------------------------------------------------------------------------
def _spread(times: Sequence[float]) -> float:
    if len(times) < 4:
        return float("inf")
    q = statistics.quantiles(times, n=4)
    med = statistics.median(times)
    return (q[2] - q[0]) / med if med > 0 else float("inf")


def _median_settled(times: Sequence[float], within: float, resolution: float = 0.0) -> bool:
    """Whether the median is known to within ``within`` (relative), or to within ``resolution``
    (absolute: the timer's own), at 95% confidence: the order statistics that bound the median's
    distribution-free interval (n/2 ± 0.98·√n) lie that close."""
    n = len(times)
    if n < SETTLE_MIN_ITERS:
        return False
    ordered = sorted(times)
    half = 0.98 * n ** 0.5
    lo, hi = max(0, int(n / 2 - half)), min(n - 1, int(n / 2 + half + 1))
    middle = statistics.median(ordered)
    half_width = (ordered[hi] - ordered[lo]) / 2
    return middle > 0 and (half_width <= within * middle or half_width <= resolution)


def spin_cycles(host_median_ms: float) -> int:
    """GPU clock cycles of spin before the start event: longer than the host takes to queue one
    forward (its host time per iteration, launches and synchronise included, with half again as
    margin), between ~0.1 and ~1 ms."""
    return int(min(SPIN_CYCLES, max(MIN_SPIN_CYCLES, 1.5 * host_median_ms * CYCLES_PER_MS)))


def _round_trip(device: torch.device) -> float:
    """One timed iteration with an empty launch in place of the forward: the same events, the same
    device-wide synchronise. What it takes is this process's own cost of the procedure (the host's
    launch, its wake-up from the synchronise, the end event's record), which varies from process to
    process by tens of microseconds while the work timed does not."""
    synchronize(device)
    start, end = _Event(enable_timing=True), _Event(enable_timing=True)
    _event_record(start)
    if _cuda_spin is not None:
        _cuda_spin(1)
    synchronize(device)
    _event_record(end)
    _event_sync(end)
    return float(_event_elapsed(start, end))


def _gpu_only_times(fn, buffers, rotations, device, load, flusher, iterations: int,
                    cycles: int = SPIN_CYCLES) -> list[float]:
    """Kernel-side times: a spin kernel keeps the GPU busy while the host queues the start event and
    the forward's launches, so the start fires when the work can begin; the end event is queued on the
    same stream right after the forward. Host launch latency and the synchronise round trip, which
    median_ms includes, are left out; so is work on other streams (median_ms keeps it). Empty if the
    spin kernel is unavailable or the candidate fails here (median_ms stands either way)."""
    if _cuda_spin is None or iterations <= 0:
        return []
    times: list[float] = []
    try:
        for i in range(iterations):
            load(rotations[i % len(rotations)])
            flusher.flush()
            synchronize(device)
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            _cuda_spin(cycles)
            _event_record(start)
            out = fn(*buffers)
            _event_record(end)
            synchronize(device)
            times.append(float(_event_elapsed(start, end)))
            del out
    except Exception:  # noqa: BLE001 - an extra view of the timing, never a verdict
        return []
    return times


def time_callable(
    fn: Callable[..., Any],
    buffers: Sequence[Any],
    rotations: Sequence[Sequence[Any]],
    device: torch.device,
    *,
    budget_s: float,
    min_iters: int = 5,
    max_iters: int = 1000,
    target_spread: float = 0.02,
    settle_within: float = 0.01,
    warmup: int = 2,
    warmup_inputs: Sequence[Any] | None = None,
    gpu_only_iters: int = 30,
    spin_waits: bool = True,
    cpus: Sequence[int] | None = None,
) -> dict[str, Any]:
    """Median time of ``fn(*buffers)`` with the buffers' values rotated between iterations.

    Each iteration copies the next rotation's values into the SAME tensors (caching keyed on
    pointers or shapes returns stale results), flushes the L2 on CUDA, and stops the timer only after
    a device-wide synchronize (work on side streams is inside the measurement). The last output of
    every rotation is kept (cloned outside the timed region) so the parent can check it.

    It stops at ``max_iters``, at ``budget_s``, once the times are tight (interquartile spread within
    ``target_spread``), or once the median is known to within ``settle_within`` or, on CUDA, to the
    event timer's resolution (95% confidence; checked every SETTLE_EVERY iterations from
    SETTLE_MIN_ITERS on): on a shared GPU every timing
    holds the GPU alone, so iterations past a known median only keep others waiting.
    """
    flusher = L2Flusher(device)
    # below this a median cannot be known anyway: CUDA events resolve about half a microsecond
    resolution = EVENT_RESOLUTION_MS if device.type == "cuda" else 0.0
    tensors = [i for i, b in enumerate(buffers) if type(b) is torch.Tensor]

    def load(rotation: Sequence[Any]) -> None:
        for i in tensors:
            _tensor_copy(buffers[i], rotation[i])

    # Warm up on other values than the timed ones: the first pass over the rotations is the
    # candidate's first sight of them, which is how a cache keyed on values shows itself.
    for step in range(warmup):
        load(warmup_inputs if warmup_inputs is not None else rotations[step % len(rotations)])
        fn(*buffers)
    synchronize(device)

    waits = SpinWaits(device, enabled=spin_waits)
    with waits, TimingCpus(cpus):
        times: list[float] = []
        host_times: list[float] = []
        round_trips: list[float] = []
        kept: dict[int, list[Any]] = {}
        seen_cpus = {host_cpu()}  # where the host side of the timing ran (seen between iterations)
        started = _perf_counter()
        iteration = 0
        while True:
            r = iteration % len(rotations)
            load(rotations[r])
            flusher.flush()
            synchronize(device)
            if device.type == "cuda":
                start, end = _Event(enable_timing=True), _Event(enable_timing=True)
                host0 = _perf_counter()
                _event_record(start)
                out = fn(*buffers)
                synchronize(device)
                _event_record(end)
                _event_sync(end)
                host1 = _perf_counter()
                times.append(float(_event_elapsed(start, end)))
            else:
                host0 = _perf_counter()
                out = fn(*buffers)
                host1 = _perf_counter()
                times.append((host1 - host0) * 1e3)
            host_times.append((host1 - host0) * 1e3)
            kept[r] = snapshot(out)  # a device clone; moved to the CPU once, after the loop
            del out
            iteration += 1
            if device.type == "cuda" and iteration % ROUND_TRIP_EVERY == 0:
                round_trips.append(_round_trip(device))
            elapsed = _perf_counter() - started
            if iteration >= max_iters:
                break
            if iteration % SETTLE_EVERY == 0:
                seen_cpus.add(host_cpu())
            if iteration >= max(min_iters, len(rotations)):
                if elapsed >= budget_s:
                    break
                if iteration >= 20 and _spread(times) <= target_spread:
                    break
                if iteration % SETTLE_EVERY == 0 and _median_settled(times, settle_within, resolution):
                    break
        gpu_times = _gpu_only_times(fn, buffers, rotations, device, load, flusher, min(gpu_only_iters, len(times)),
                                    spin_cycles(statistics.median(host_times))) if device.type == "cuda" else []
    first = times[: len(rotations)]
    repeats = times[len(rotations):]
    median = statistics.median(times)
    round_trip = statistics.median(round_trips) if round_trips else None
    return {
        # the current stream's kernel time with the host's launch latency hidden (see _gpu_only_times):
        # what Nsight Compute's gpu__time_duration sees; median_ms, which the reward uses, is end to end
        "gpu_median_ms": statistics.median(gpu_times) if gpu_times else None,
        "gpu_iterations": len(gpu_times),
        "first_sight_median_ms": statistics.median(first),
        "first_sight_min_ms": min(first),
        "repeat_median_ms": statistics.median(repeats) if repeats else None,
        "median_ms": median,
        # the empty iteration's median, timed between the forward's own in this process, and the
        # forward's median beyond it (never below the kernel side)
        "round_trip_ms": round_trip,
        "round_trip_iterations": len(round_trips),
        "net_median_ms": (max(median - round_trip, statistics.median(gpu_times) if gpu_times else 0.0)
                          if round_trip is not None else None),
        "host_median_ms": statistics.median(host_times),
        "min_ms": min(times),
        "max_ms": max(times),
        "spread": _spread(times) if len(times) >= 4 else None,
        "iterations": len(times),
        "host_waits": waits.mode,  # "spin": the synchronise busy-waited (SpinWaits)
        "host_cpus": sorted(c for c in seen_cpus | {host_cpu()} if c is not None),
        "total_ms": sum(times),
        "kept_outputs": [kept[r] for r in sorted(kept)],  # on the device: the caller moves them
    }
