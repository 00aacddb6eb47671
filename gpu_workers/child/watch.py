"""What really runs inside ``ModelNew.forward``, on every call (REWARD_HACKS families 14, 19, 27, 28).

The dispatch-mode tracer sees only ops that reach the Python dispatch key: ops under
``_DisableTorchDispatch`` or a C++ dispatch-key guard, and ``at::`` calls from an extension below it,
go past it; and it was on only during the trials, which a candidate can tell apart from the timing.
This watch is one profiler session (PyTorch's Kineto profiler: the dispatcher's RecordFunction
callbacks for every operator, whatever dispatch keys are excluded, and on CUDA CUPTI's activity
records of every kernel launched on the device, from any API) that runs from before the warm-up
to after the last call, so every call of ``forward`` runs under the same observation: trials,
warm-up, timing and the checks after it. Each call is marked with a range under a label drawn
per evaluation, and what started inside a range (ops from any thread, kernels whose launch did)
is the forward's.

What counts as the candidate's own: operators registered after its import (its ``TORCH_LIBRARY``
ops), and device kernels whose names its sources define (``__global__`` functions, Triton
``@jit`` functions). PyTorch's other namespaces (``mkldnn``, ``quantized``, ...) were registered
before its import, so they are library compute like ``aten``. A call that reaches NumPy from
Python (``Tensor.numpy``, ``__array__``, ``__dlpack__``, any NumPy function) is seen by a C-call
profile hook active only inside forward.

Only the strict track watches (library compute is allowed on open); the candidate pays the
profiler's cost per dispatcher call (a few µs on the CPU), which a kernel made of its own ops keeps
small.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch

# Device activity that is memory traffic, not compute (the allow-list of the strict track).
_MEMORY_KERNELS = re.compile(r"^(Memcpy|Memset|\[?memcpy|\[?memset)|FillFunctor|fill_kernel|copy_kernel|"
                             r"CatArrayBatchedCopy|direct_copy|CUDAFunctor_copy|index_elementwise_kernel.*copy",
                             re.IGNORECASE)
_GLOBAL_FN = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+|inline\s+|extern\s+\"C\"\s+)*"
                        r"(?:void|[\w:<>]+)\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)\s*\(")
_TRITON_FN = re.compile(r"@(?:triton\.)?jit[^\n]*\n(?:\s*@[^\n]*\n)*\s*def\s+(\w+)\s*\(")
_EXTERN_C_KERNEL = re.compile(r"extern\s+\"C\"\s+__global__\s+void\s+(\w+)")
# Where torch publishes the switch of a thread's operator records (ForwardWatch.start).
_RECORD_SWITCH = "_enable_record_function"
_RECORD_SWITCH_OWNERS = (torch._C._autograd, torch.autograd)


def own_kernel_names(source: str) -> set[str]:
    """Names of the device kernels the candidate's sources define."""
    return set(_GLOBAL_FN.findall(source)) | set(_TRITON_FN.findall(source)) | set(_EXTERN_C_KERNEL.findall(source))


def kernel_base_name(name: str) -> str:
    """``void ns::my_kernel<float, 4>(float const*, ...)`` -> ``my_kernel``."""
    text = name.strip()
    depth, cut = 0, len(text)
    for i, ch in enumerate(text):  # the name ends where its argument list opens (outside templates)
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            cut = i
            break
    head = text[:cut]
    head = re.sub(r"<.*>$", "", head).strip()
    head = head.split()[-1] if head.split() else head
    return head.rsplit("::", 1)[-1]


def registered_ops() -> set[str]:
    """Every operator the dispatcher knows, as ``namespace::name`` without the overload."""
    return {name.split(".", 1)[0] for name in torch._C._dispatch_get_all_op_names()}


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_REGISTRATION_API = (os.path.join(_TORCH_DIR, "_library") + os.sep, os.path.join(_TORCH_DIR, "library.py"))


def candidate_ops(new: set[str], own_roots: tuple[str, ...] = ()) -> set[str]:
    """Of the operators registered since the snapshot, the candidate's: registered from Python
    outside torch's package (its own module, ``<kernel>``) or through torch's public registration API
    (``torch.library.custom_op``; a Python body's own ops are seen anyway), or from C++ beneath a
    folder it could write (``TORCH_LIBRARY`` in its extension). torch registers some operators late
    (on first import of a module, or from a library loaded lazily, at a C++ path of its build):
    those are library code like the rest."""
    roots = tuple(r.rstrip(os.sep) + os.sep for r in own_roots)
    own = set()
    for name in new:
        try:
            dump = torch._C._dispatch_dump(name)
        except RuntimeError:
            dump = ""
        where = re.search(r"registered at (\S+?):\d+", dump)
        path = where.group(1) if where else ""
        if path.startswith(_REGISTRATION_API) or (roots and path.startswith(roots)):
            own.add(name)
        elif path and not path.startswith(_TORCH_DIR) and not re.search(r"\.(c|cc|cpp|cxx|cu|h|hpp)$", path):
            own.add(name)
    return own


_NUMPY_BRIDGES = frozenset({"numpy", "__array__", "__dlpack__", "_to_dlpack", "from_numpy", "_from_dlpack",
                            "from_dlpack", "__array_interface__"})


def _reaches_numpy(func: Any) -> str | None:
    owner = getattr(func, "__self__", None)
    module = getattr(func, "__module__", None) or getattr(type(owner), "__module__", None) or ""
    name = getattr(func, "__name__", "")
    if module.split(".")[0] == "numpy" or type(owner).__module__.split(".")[0] == "numpy":
        return f"numpy.{name}"
    objclass = getattr(func, "__objclass__", None)
    if name in _NUMPY_BRIDGES and (module.startswith("torch") or (objclass is not None and
                                                                  objclass.__module__.startswith("torch"))
                                   or isinstance(owner, torch.Tensor) or owner is torch._C):
        return f"torch {name}"
    return None


class ForwardWatch:
    """One profiler session over every forward call; ``call`` marks one. Built before any candidate
    code is imported (its operator snapshot is torch's own)."""

    def __init__(self, device: torch.device, kernel_source: str, enabled: bool = True,
                 own_roots: tuple[str, ...] = (), allowed_ops: tuple[str, ...] = (),
                 exempt: Callable[[], Any] | None = None):
        self.enabled = enabled
        self.own_roots = own_roots
        self.allowed_ops = frozenset(allowed_ops)  # the rule set's allocation, view and copy ops
        self._exempt = exempt  # the audit guard refuses sys.setprofile to everyone else
        self.device = device
        self.label = f"kernelcourt.forward.{os.urandom(6).hex()}"
        self.before_ops = registered_ops() if enabled else set()
        self.own_kernels = own_kernel_names(kernel_source)
        self._profiler: Any = None
        self.numpy_calls: dict[str, int] = {}
        self.calls = 0
        self._record_function = torch.autograd.profiler.record_function
        self._setprofile = sys.setprofile
        self._getprofile = sys.getprofile
        # the thread's switch of the profiler's operator records, bound before any candidate code: the
        # watch's alone while it watches (``start``)
        self._records = torch._C._autograd._enable_record_function
        self._switched_off: list[int] = []

    def start(self) -> None:
        if not self.enabled:
            return
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        # every thread: a pool started at import that does the work while forward waits is seen too
        try:
            config = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
        except TypeError:  # a torch without the switch records the threads it follows
            config = None
        self._profiler = profile(activities=activities, record_shapes=False, with_stack=False,
                                 experimental_config=config)
        self._profiler.__enter__()
        # A forward that switched its thread's operator records off would run library compute unseen;
        # every public name of the switch refuses while the watch runs, and each try is reported.
        switched = self._switched_off

        def refused(*_args: Any, **_kwargs: Any) -> None:
            switched.append(1)
            raise RuntimeError("the judge keeps the profiler's operator records on while it watches forward")

        for owner in _RECORD_SWITCH_OWNERS:
            setattr(owner, _RECORD_SWITCH, refused)
        # Between calls only the judge's work runs on this thread (copies in, reads and checksums out,
        # the flush): unrecorded, it is neither in the report nor charged to the candidate's timing
        # loop, which the trusted baseline's loop, run unwatched, is held against (judge.timer_finding).
        self._records(False)

    @contextmanager
    def call(self) -> Iterator[None]:
        """Around one forward call (and nothing of the judge's)."""
        if not self.enabled:
            yield
            return
        self.calls += 1
        counts = self.numpy_calls

        def hook(frame: Any, event: str, arg: Any) -> None:
            if event == "c_call":
                hit = _reaches_numpy(arg)
                if hit:
                    counts[hit] = counts.get(hit, 0) + 1

        previous = self._getprofile()
        self._records(True)
        try:
            with self._record_function(self.label):
                self._set(hook)
                try:
                    yield
                finally:
                    self._set(previous)
        finally:
            self._records(False)

    def _set(self, hook: Any) -> None:
        if self._exempt is None:
            self._setprofile(hook)
            return
        with self._exempt():
            self._setprofile(hook)

    def stop(self) -> dict[str, Any]:
        """Everything that started inside a forward range: ``ops`` (name -> count), ``kernels``
        (device kernel name -> count), ``numpy`` (calls that reached NumPy) and the verdict's
        inputs ``library_ops`` / ``library_kernels`` (what is neither the candidate's own nor an
        allocation, view, copy or memory transfer) and ``kernel_spans_us`` (each call's device time
        by CUPTI's records)."""
        report: dict[str, Any] = {"watched": self.enabled, "calls": self.calls, "ops": {}, "kernels": {},
                                  "numpy": dict(self.numpy_calls), "library_ops": {}, "library_kernels": {},
                                  "own_ops": [], "other_stream_kernels": {}, "kernel_spans_us": []}
        if not self.enabled or self._profiler is None:
            return report
        self._records(True)
        for owner in _RECORD_SWITCH_OWNERS:
            setattr(owner, _RECORD_SWITCH, self._records)
        self._profiler.__exit__(None, None, None)
        report["records_switched_off"] = len(self._switched_off)
        own_ops = candidate_ops(registered_ops() - self.before_ops, self.own_roots)
        report["own_ops"] = sorted(own_ops)
        events = list(self._profiler.profiler.kineto_results.events())
        ops, kernels, elsewhere, spans = attribute(events, self.label)
        report["ops"], report["kernels"], report["other_stream_kernels"] = ops, kernels, elsewhere
        report["kernel_spans_us"] = [round(span / 1e3, 3) for span in spans]  # judge.device_time_finding
        report["events"] = {"host": sum(_on_cpu(e) for e in events), "device": sum(not _on_cpu(e) for e in events)}
        allowed = self.allowed_ops
        known = self.before_ops
        for name, count in ops.items():
            namespace, _, op = name.partition("::")
            if name in own_ops or name not in known:
                continue  # the candidate's own operator (or not an operator: an annotation)
            if namespace in ("aten", "prims") and op in allowed:
                continue
            report["library_ops"][name] = count
        for name, count in kernels.items():
            if _MEMORY_KERNELS.search(name) or kernel_base_name(name) in self.own_kernels:
                continue
            report["library_kernels"][name] = count
        return report


class Attribution(NamedTuple):
    ops: dict[str, int]  # host events that started inside a range, by name
    kernels: dict[str, int]  # device kernels launched inside a range, by name
    elsewhere: dict[str, int]  # of those, the ones on a stream none of the judge's work ran on
    spans_ns: list[int]  # per range with kernels: how long they ran on the device (their union)


def attribute(events: list[Any], label: str) -> Attribution:
    """The ops, kernels, kernels on other streams and per-call device spans of the ranges named ``label``.

    Kineto's events carry two id spaces: a host-side event of the framework (an operator, a range)
    has its own id (``correlation_id``) and no link; a device kernel and the runtime or driver call
    that launched it share CUPTI's correlation id, and both link (``linked_correlation_id``) to the
    innermost framework event open on the launching thread (to nothing, on a thread with none open,
    as a native thread of the candidate's). CUPTI's own host records (synchronisations, module
    loading) come unlinked beside the framework's, and not every torch says which is which. So a
    kernel is the forward's when the call that launched it (the runtime or driver call with the same
    CUPTI id and the same link) started inside a range, whatever thread made it and whenever the kernel ran;
    a kernel whose call was not recorded is the forward's when it links to a framework event that
    started inside one. Ops: the unlinked host events that started inside a range (the verdict
    counts only those the dispatcher knows). The third result: forward kernels on a stream none of
    the judge's own device work (copies, reads, fingerprints, all on the timer's stream) ran on. The
    fourth: for each range, how long its kernels ran on the device by CUPTI's own timestamps (the
    union of their intervals, so overlapping streams count once), which no timer of the candidate's
    process can change."""
    ranges = sorted((e.start_ns(), e.start_ns() + e.duration_ns()) for e in events
                    if e.name() == label and _on_cpu(e) and not _linked(e))

    def which(t: int) -> int:
        """The range that t falls in (-1: none)."""
        lo, hi = 0, len(ranges)
        while lo < hi:  # the last range that starts at or before t
            mid = (lo + hi) // 2
            if ranges[mid][0] <= t:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1 if lo > 0 and t <= ranges[lo - 1][1] else -1

    ops: dict[str, int] = {}
    opened_inside: dict[int, int] = {}  # own id of an unlinked host event that started inside a range -> the range
    calls: dict[tuple[int, int], list[int]] = {}  # (own id, link) of a host event -> its start times
    device_events = []
    for e in events:
        if not _on_cpu(e):
            device_events.append(e)
            continue
        if _linked(e) or _is_api_call(e):  # a framework event launches nothing (its id is not CUPTI's)
            calls.setdefault((_own_id(e), _linked(e)), []).append(e.start_ns())
        where = -1 if _linked(e) else which(e.start_ns())
        if where < 0:
            continue
        opened_inside[_own_id(e)] = where
        if e.name() != label:
            ops[e.name()] = ops.get(e.name(), 0) + 1
    kernels: dict[str, int] = {}
    ran: dict[int, list[tuple[int, int]]] = {}  # range -> its kernels' device intervals
    judge_streams: set[int] = set()
    forward_streams: list[tuple[str, int]] = []
    for e in device_events:
        if e.name() == label or _is_annotation(e):
            continue  # the range's own device-side span
        link, stream = _linked(e), _stream(e)
        launches = calls.get((_own_id(e), link))
        where = next((r for r in map(which, launches) if r >= 0), -1) if launches else opened_inside.get(link, -1)
        if where >= 0:
            kernels[e.name()] = kernels.get(e.name(), 0) + 1
            forward_streams.append((e.name(), stream))
            ran.setdefault(where, []).append((e.start_ns(), e.start_ns() + max(e.duration_ns(), 0)))
        elif stream >= 0:
            judge_streams.add(stream)
    elsewhere: dict[str, int] = {}
    for name, stream in forward_streams:
        if judge_streams and stream >= 0 and stream not in judge_streams:
            elsewhere[name] = elsewhere.get(name, 0) + 1
    return Attribution(ops, kernels, elsewhere, [_union_ns(ran[r]) for r in sorted(ran)])


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for lo, hi in sorted(intervals):
        if end is None or lo > end:
            total += hi - lo
            end = hi
        elif hi > end:
            total += hi - end
            end = hi
    return total


def _is_api_call(event: Any) -> bool:
    """A CUDA runtime or driver call as CUPTI records it (``cudaLaunchKernel``, ``cuLaunchKernelEx``,
    ``cudaGraphLaunch``...). Unlinked, it shares the shape of a framework event, and its CUPTI id can
    equal the framework id of an op inside a range: the judge's spin, launched with no framework event
    open just before a timed call, was counted as the forward's on the H200 that way. A framework event
    that a candidate names like one only adds launches inside its own ranges."""
    return event.name().startswith("cu")


def _stream(event: Any) -> int:
    getter = getattr(event, "device_resource_id", None)
    try:
        return int(getter()) if getter is not None else -1
    except (TypeError, ValueError):
        return -1


def _on_cpu(event: Any) -> bool:
    return str(event.device_type()).endswith("CPU")


def _id(event: Any, attr: str) -> int:
    getter: Callable[[], int] | None = getattr(event, attr, None)
    if getter is None:
        return 0
    try:
        return int(getter())
    except (TypeError, ValueError):
        return 0


def _own_id(event: Any) -> int:
    return _id(event, "correlation_id")


def _linked(event: Any) -> int:
    return _id(event, "linked_correlation_id")


def _is_annotation(event: Any) -> bool:
    getter = getattr(event, "is_user_annotation", None)
    try:
        return bool(getter()) if getter is not None else False
    except (TypeError, ValueError):
        return False
