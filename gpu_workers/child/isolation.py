"""The judge's own tensor work inside the candidate's process, kept out of the candidate's reach
(REWARD_HACKS families 5, 20, 21, 22, 24), and the cheap per-call evidence the timing loop keeps.

* ``judge_ops()``: the judge copies inputs in, reads outputs out and compares with every candidate
  torch-function mode, dispatch mode, subclass ``__torch_function__``/``__torch_dispatch__`` off
  (the Python dispatch keys excluded, torch-function handling disabled, both mode stacks emptied
  for the duration and restored after). A mode that does the real work when the judge touches
  the output then never runs outside the timed window.
* ``OperatorSnapshot``: the dispatcher's registrations for every operator the judge itself calls,
  and the backend fallbacks of every dispatch key, taken before the candidate's import. A candidate
  that registers its own kernel for ``aten::copy_`` (any key, C++ or Python) or a fallback would run
  code inside the judge's operations, whatever it calls the registration.
* ``read_all``: every byte of every output read (a checksum) as the timed window's last act, so an
  output filled on first touch (a fault handler, a lazily mapped buffer) is filled inside it;
  ``late_changes``: the same checksums read again once the device is idle must not have moved, or
  work on the output went on after the window closed;
  ``copy_at_return``: the judge's first read of an output, as forward returns, from ordinary readable
  memory of the process (a kernel copy that cannot fault a page in), never a fault handler's.
* ``Fingerprint``: a few projections of an output on secret random vectors, with the bound that
  any output within the tolerance must meet; the trusted reference computes the same for the same
  inputs, so every timed call's output is checked, not a sample.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from .measure import _torch_empty, elements_spanned, has_storage

_disable_dispatch = torch._C._DisableTorchDispatch
_disable_function = torch._C.DisableTorchFunction
_len_function_stack = torch._C._len_torch_function_stack
_pop_function_mode = torch._C._pop_torch_function_stack
_push_function_mode = torch._C._push_on_torch_function_stack
_len_dispatch_stack = torch._C._len_torch_dispatch_stack
_pop_dispatch_mode = torch._C._pop_torch_dispatch_stack
_push_dispatch_mode = torch._C._push_on_torch_dispatch_stack
_tensor_sum = torch.Tensor.sum
_tensor_view = torch.Tensor.view
_tensor_reshape = torch.Tensor.reshape
_tensor_to = torch.Tensor.to
_tensor_abs = torch.Tensor.abs
_tensor_mul = torch.Tensor.mul
_tensor_add = torch.Tensor.add
_torch_dot = torch.dot
_torch_stack = torch.stack
_tensor_tolist = torch.Tensor.tolist
_torch_randn = torch.randn
_generator = torch.Generator
_open = open


@contextmanager
def judge_ops() -> Iterator[None]:
    """The judge's tensor operations with every candidate mode, subclass handler and hook off."""
    functions: list[Any] = []
    dispatches: list[Any] = []
    try:
        while _len_function_stack() > 0:
            functions.append(_pop_function_mode())
        while _len_dispatch_stack() > 0:  # user modes and infra modes (fake, proxy, functional) alike
            dispatches.append(_pop_dispatch_mode(None))
        with ExitStack() as stack:
            stack.enter_context(_disable_dispatch())
            stack.enter_context(_disable_function())
            yield
    finally:
        for mode in reversed(dispatches):
            _push_dispatch_mode(mode)
        for mode in reversed(functions):
            _push_function_mode(mode)


# The operators the judge's own work calls (copies in, reads out, comparisons, poison, flush).
JUDGE_OPERATORS = (
    "aten::copy_", "aten::clone", "aten::detach", "aten::_to_copy", "aten::to", "aten::empty", "aten::empty_like",
    "aten::empty_strided", "aten::fill_", "aten::zero_", "aten::equal", "aten::isnan", "aten::where", "aten::sum",
    "aten::amax", "aten::contiguous", "aten::dot", "aten::mul", "aten::add", "aten::abs", "aten::view",
    "aten::reshape", "aten::normal_", "aten::randn", "aten::_local_scalar_dense", "aten::item", "aten::sub",
    "aten::isfinite", "aten::logical_and", "aten::bitwise_and", "aten::resize_", "aten::set_", "aten::as_strided",
    "aten::_copy_from", "aten::_copy_from_and_resize",
)


def _dispatch_keys() -> list[Any]:
    keys = []
    for name in dir(torch._C.DispatchKey):
        if name.startswith("_"):
            continue
        key = getattr(torch._C.DispatchKey, name)
        if isinstance(key, torch._C.DispatchKey):
            keys.append(key)
    return keys


class OperatorSnapshot:
    """The registrations of the judge's operators and every key's backend fallback."""

    def __init__(self) -> None:
        self.tables = {name: self._dump(name) for name in JUDGE_OPERATORS}
        self.fallbacks = self._fallbacks()

    @staticmethod
    def _dump(name: str) -> str:
        try:
            return torch._C._dispatch_dump(name)
        except RuntimeError:
            return ""

    @staticmethod
    def _fallbacks() -> set[str]:
        found: set[str] = set()
        has_fallback = getattr(torch._C, "_dispatch_has_backend_fallback", None)
        if has_fallback is None:
            return found
        for key in _dispatch_keys():
            try:
                if has_fallback(key):
                    found.add(str(key))
            except (RuntimeError, TypeError):
                continue
        return found

    def changed(self) -> list[str]:
        """Operators of the judge whose registrations changed, and new backend fallbacks."""
        out = [f"{name} (a kernel registered over it)" for name, text in self.tables.items()
               if self._dump(name) != text]
        out += [f"a backend fallback for {key}" for key in sorted(self._fallbacks() - self.fallbacks)]
        return out


# ---- outputs are really there -------------------------------------------------------------------
def read_all(leaves: Sequence[Any]) -> list[torch.Tensor]:
    """Read every byte of every tensor output: a sum over each (in its own dtype: a vectorised pass
    over all its memory; on CUDA queued on the stream). The sums come back, uncompared: read again
    later (``late_changes``), an output that is final gives the same sums bit for bit."""
    sums = []
    for leaf in leaves:
        if type(leaf) is torch.Tensor and leaf.numel():
            flat = _tensor_reshape(leaf, -1)
            if leaf.is_complex():
                flat = torch.view_as_real(flat)
            checksum = _tensor_sum(flat)
            if leaf.device.type == "cpu":
                float(checksum)
            sums.append(checksum)
    return sums


def late_changes(pairs: Sequence[tuple[Sequence[torch.Tensor], Sequence[torch.Tensor]]]) -> list[int]:
    """The indices of the pairs (a timed window's ``read_all`` of an output, and the same read once
    the device is idle) whose sums differ: the output changed after the window's last act, so some
    of its work ran after the timer stopped (a thread, a stream the timer's never waited for). The
    sums are moved off the device once per device, not once per window."""
    changed: set[int] = set()
    columns: dict[torch.device, tuple[list[Any], list[Any], list[int]]] = {}
    for index, (seen, again) in enumerate(pairs):
        if len(seen) != len(again):  # an output that gained or lost a leaf
            changed.add(index)
            continue
        for a, b in zip(seen, again):
            firsts, seconds, owners = columns.setdefault(a.device, ([], [], []))
            firsts.append(_tensor_to(a, torch.float64))
            seconds.append(_tensor_to(b, torch.float64))
            owners.append(index)
    for firsts, seconds, owners in columns.values():
        for owner, a, b in zip(owners, _tensor_tolist(_tensor_to(_torch_stack(firsts), "cpu")),
                               _tensor_tolist(_tensor_to(_torch_stack(seconds), "cpu"))):
            if a != b and not (a != a and b != b):  # NaN both times is no change
                changed.add(owner)
    return sorted(changed)


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("length", ctypes.c_size_t)]


def _bind_vm_readv() -> Any:
    """``process_vm_readv`` of glibc, bound before any candidate import. Through ``PyDLL`` the call
    keeps the GIL, so no Python thread of the candidate's runs while the judge copies."""
    try:
        function = ctypes.PyDLL(None, use_errno=True).process_vm_readv
    except (OSError, AttributeError):
        return None
    function.restype = ctypes.c_ssize_t
    function.argtypes = [ctypes.c_int, ctypes.POINTER(_Iovec), ctypes.c_ulong, ctypes.POINTER(_Iovec),
                         ctypes.c_ulong, ctypes.c_ulong]
    return function


_vm_readv = _bind_vm_readv()
_getpid = os.getpid
_tensor_data_ptr = torch.Tensor.data_ptr
_tensor_as_strided = torch.Tensor.as_strided


def _copy_unfaulted(leaf: torch.Tensor) -> torch.Tensor | None:
    """The bytes under a strided CPU tensor, read by the kernel (``process_vm_readv`` on this process)
    into a new tensor of the same strides: memory without access, unmapped or served by a fault
    handler fails the read instead of running the handler. None when a byte could not be read."""
    extent = elements_spanned(leaf)
    into = _torch_empty(extent, dtype=leaf.dtype)
    address, target, nbytes = _tensor_data_ptr(leaf), _tensor_data_ptr(into), extent * leaf.element_size()
    done, pid = 0, _getpid()
    while done < nbytes:
        local, remote = _Iovec(target + done, nbytes - done), _Iovec(address + done, nbytes - done)
        got = _vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if got <= 0:
            return None
        done += got
    return _tensor_as_strided(into, leaf.shape, leaf.stride())


def _plain_cpu(leaf: Any) -> bool:
    """A strided CPU tensor of its own class whose storage holds every element it claims."""
    return (type(leaf) is torch.Tensor and leaf.device.type == "cpu" and leaf.layout == torch.strided
            and leaf.numel() > 0 and not leaf.is_quantized and not leaf.is_conj() and not leaf.is_neg()
            and has_storage(leaf))


def copy_at_return(leaves: Sequence[Any], clone: Any) -> tuple[list[Any], list[str]]:
    """The judge's first read of forward's outputs, its first act after the return (REWARD_HACKS
    families 6 and 8): every CPU tensor's bytes copied by the kernel without faulting a page in (a
    mapping that a handler fills on first touch cannot be filled by this read), the rest by
    ``clone``. Work a candidate left running after its return shows as an output that later reads
    see change, as long as it takes longer than this copy takes to begin. Also the outputs whose
    memory could not be read so, which then are cloned as any other (the finding is made)."""
    copies, unreadable = [], []
    for k, leaf in enumerate(leaves):
        plain = _vm_readv is not None and _plain_cpu(leaf)
        copy = _copy_unfaulted(leaf) if plain else None
        if plain and copy is None:
            unreadable.append(f"output {k}: bytes from {_tensor_data_ptr(leaf):#x} could not be read "
                              "without a page fault")
        copies.append(copy if copy is not None else clone(leaf))
    return copies, unreadable


# ---- fingerprints ------------------------------------------------------------------------------
PROJECTIONS = 3
SIGMAS = 8.0  # an output within the tolerance fails a projection with probability below 1e-15


class Fingerprint:
    """Projections of an output on ``PROJECTIONS`` random vectors drawn, a chunk at a time, from a
    secret seed on the output's device (the reference's process and the candidate's judge draw the
    same ones). The check's bound, from the reference output r alone, is SIGMAS * ||atol + rtol|r| ||_2:
    for an output c within the tolerance elementwise, w.(c - r) is a normal variable (w is Gaussian
    and secret, c - r cannot depend on it) whose deviation is at most that norm over SIGMAS, so an
    honest output fails with probability below 1e-15, while an output that is another input's
    answer, stale or partly computed misses by about its whole difference's norm."""

    CHUNK = 1 << 22

    CACHE_ELEMENTS = 1 << 24  # weights kept between calls up to this many values

    def __init__(self, seed: int):
        self.seed = seed & ((1 << 62) - 1)
        self._cache: dict[tuple[str, int, int, int], torch.Tensor] = {}
        self._cached = 0

    def _weights(self, device: torch.device, projection: int, chunk: int, size: int) -> torch.Tensor:
        key = (str(device), projection, chunk, size)
        if key in self._cache:
            return self._cache[key]
        gen = _generator(device=device)
        gen.manual_seed((self.seed * 1_000_003 + projection * 7919 + chunk) & ((1 << 63) - 1))
        w = _torch_randn(size, generator=gen, device=device, dtype=torch.float32)
        if self._cached + size <= self.CACHE_ELEMENTS:
            self._cache[key] = w
            self._cached += size
        return w

    def _project(self, leaf: torch.Tensor) -> list[float]:
        flat = _tensor_reshape(leaf, -1)
        totals = [0.0] * PROJECTIONS
        sums = []
        for index, start in enumerate(range(0, flat.numel(), self.CHUNK)):
            # float32 sums (BLAS blocks them): their rounding is some 1e-7 of the output's norm, the
            # bound at least SIGMAS * atol * sqrt(n); float64 or wider outputs keep their own width
            part = flat[start:start + self.CHUNK]
            if part.dtype != torch.float64:
                part = _tensor_to(part, torch.float32)
            for p in range(PROJECTIONS):
                w = self._weights(part.device, p, index, part.numel())
                sums.append((p, _torch_dot(part, _tensor_to(w, part.dtype))))
        for p, value in sums:
            totals[p] += float(value)
        return totals

    def of(self, leaves: Sequence[Any]) -> list[list[float] | None]:
        """Projections of each floating output (None for the others)."""
        return [self._project(leaf) if type(leaf) is torch.Tensor and leaf.is_floating_point() and leaf.numel()
                else None for leaf in leaves]

    @staticmethod
    def bounds(leaves: Sequence[Any], atol: float, rtol: float) -> list[list[float] | None]:
        out: list[list[float] | None] = []
        for leaf in leaves:
            if type(leaf) is torch.Tensor and leaf.is_floating_point() and leaf.numel():
                flat = _tensor_reshape(leaf, -1)
                square = 0.0
                for start in range(0, flat.numel(), Fingerprint.CHUNK):  # float64 a chunk at a time
                    tol = _tensor_add(_tensor_mul(_tensor_abs(_tensor_to(flat[start:start + Fingerprint.CHUNK],
                                                                         torch.float64)), rtol), atol)
                    square += float(_torch_dot(tol, tol))
                out.append([SIGMAS * math.sqrt(square)] * PROJECTIONS)
            else:
                out.append(None)
        return out


# ---- inputs made when they are needed ----------------------------------------------------------
class JustInTime(Sequence):
    """Input sets made from their seeds at the moment they are asked for, and never kept: no input
    of a later timed call exists in the process before that call (nothing for a first call to find
    in memory and compute ahead: super-batching). ``make(seed)`` is the trusted task's own."""

    def __init__(self, make: Any, seeds: Sequence[int]):
        self._make = make
        self._seeds = list(seeds)

    def __len__(self) -> int:
        return len(self._seeds)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self._make(self._seeds[index])


# ---- which native objects are mapped -----------------------------------------------------------
def executable_mappings() -> dict[str, int]:
    """File-backed executable mappings of this process (``/proc/self/maps``): path -> inode."""
    try:
        with _open("/proc/self/maps", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return {}
    return mapped_objects(text)


def mapped_objects(maps_text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in maps_text.splitlines():
        fields = line.split(None, 5)
        if len(fields) < 6 or "x" not in fields[1]:
            continue
        path = fields[5].strip()
        if path.startswith("["):
            continue
        try:
            found[path] = int(fields[4])
        except ValueError:
            continue
    return found


# ---- CPU time of the timed calls ---------------------------------------------------------------
_process_time = time.process_time  # CLOCK_PROCESS_CPUTIME_ID: every thread, nanosecond resolution


def process_cpu_s() -> float:
    """CPU seconds this process (all its threads) has used."""
    return _process_time()
