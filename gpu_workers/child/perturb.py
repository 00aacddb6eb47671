"""The second weight configuration, made while a model is constructed, so the reference's ``Model``
and the candidate's ``ModelNew`` are both built under it.

Perturbing after construction (and loading the result into the candidate) never reached what a
candidate derives from its weights in ``__init__`` (a conv weight pre-scaled into its own
``nn.Parameter``): the derived copy kept the unperturbed values and an honest kernel failed. Here
every floating parameter is perturbed **before anything reads it** and again at the end of
construction where it was rewritten since (an ``init`` function filling it in place), and a tensor
computed from perturbed values is *derived*: a parameter made from it is left as it is. The noise of
one parameter depends only on the seed, its shape, dtype and its exact values, so two models that
hold the same parameter (the reference and a candidate built by the same seed, in whatever structure
and under whatever name) end with the same perturbed values, and a constant (LayerNorm's ones and
zeros) changes like every other value: a shortcut that assumes the constant still shows.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

RELATIVE = 0.1  # noise of a tenth of the parameter's mean magnitude (1.0 where it is all zeros)


def _storage(t: Any) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # meta or storage-less tensors
        return 0


# Elements of noise made at a time: a large parameter (a 4 GiB linear weight) never gets a second
# full-size copy beside it on the host (its bytes hashed, its magnitude, its noise), which the
# children's memory bounds do not count.
CHUNK = 1 << 22


def perturb_(seed: int, param: Any) -> None:
    """Add the noise of ``param`` to it in place: a function of the seed and the parameter's shape,
    dtype and exact values (equal parameters get equal noise, in any model)."""
    import torch

    data = param.detach()
    host = data.to("cpu").contiguous().reshape(-1)  # the parameter's own storage where it is already so
    count = host.numel()
    digest = hashlib.sha256()
    digest.update(str((seed, tuple(data.shape), str(data.dtype))).encode())
    if count:
        digest.update(host.view(torch.uint8).numpy().data)  # hashed where it lies, not copied out
    generator = torch.Generator().manual_seed(int.from_bytes(digest.digest()[:8], "little") & ((1 << 63) - 1))
    wide = torch.float64 if data.dtype == torch.float64 else torch.float32
    total = 0.0
    for start in range(0, count, CHUNK):
        total += float(host[start:start + CHUNK].abs().sum(dtype=torch.float64))
    scale = total / count if count else 0.0
    if not math.isfinite(scale):  # a parameter left uninitialised (torch.empty) may hold anything
        scale = 0.0
    amplitude = RELATIVE * (scale or 1.0)
    target = data.view(-1) if data.is_contiguous() else None
    pieces = []
    for start in range(0, count, CHUNK):
        noise = torch.randn(min(CHUNK, count - start), generator=generator, dtype=wide).mul_(amplitude).to(
            dtype=data.dtype, device=data.device)
        if target is not None:
            target[start:start + noise.numel()].add_(noise)
        else:
            pieces.append(noise)
    if target is None and pieces:
        data.add_(torch.cat(pieces).view(data.shape))


class _Perturber:
    def __init__(self, seed: int):
        self.seed = seed
        self.params: dict[int, Any] = {}  # id -> parameter seen
        self.versions: dict[int, int] = {}  # id -> its version just after its last perturbation
        self.derived: set[int] = set()  # storages of tensors computed from perturbed values
        self.derived_params: set[int] = set()  # ids of parameters made or written from them
        self.param_of_storage: dict[int, int] = {}  # storage -> id of the parameter that owns it
        self.keep: list[Any] = []  # derived tensors kept alive: a freed storage's address is reused

    def note(self, param: Any) -> None:
        if id(param) not in self.params:
            self.params[id(param)] = param
            storage = _storage(param)
            if storage in self.derived:
                self.derived_params.add(id(param))  # a parameter over a derived tensor
            elif storage:
                self.param_of_storage.setdefault(storage, id(param))

    def current(self, param: Any) -> None:
        """Perturb ``param`` unless it is derived or already perturbed at its current version."""
        import torch

        self.note(param)
        if not param.is_floating_point() or not param.numel() or param.is_meta:
            return
        if id(param) in self.derived_params:
            return
        if self.versions.get(id(param)) == param._version:
            return
        with torch.no_grad():
            perturb_(self.seed, param)
        self.versions[id(param)] = param._version

    def finish(self, model: Any) -> None:
        for param in model.parameters():
            self.current(param)


def _leaves(value: Any) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)


@contextmanager
def perturbed_construction(seed: int) -> Iterator[_Perturber]:
    """Construct a model inside this context, then call ``finish(model)`` on what it yields."""
    import torch
    from torch.overrides import TorchFunctionMode

    state = _Perturber(seed)
    parameter = torch.nn.Parameter

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            inputs = list(_leaves(args)) + list(_leaves(kwargs))
            # an in-place op's target (init functions: ``kaiming_uniform_``) is perturbed after it, at
            # its next read, from what it then holds: perturbing it first would be work thrown away
            written = args[0] if args and getattr(func, "__name__", "").endswith("_") else None
            for t in inputs:  # a parameter is perturbed before anything reads it (or a view of it)
                if isinstance(t, parameter):
                    state.note(t)
                if t is written:
                    continue
                if isinstance(t, parameter):
                    state.current(t)
                else:
                    owner = state.param_of_storage.get(_storage(t))
                    if owner is not None:
                        state.current(state.params[owner])
            touched = any(isinstance(t, parameter) or _storage(t) in state.derived
                          or _storage(t) in state.param_of_storage for t in inputs)
            out = func(*args, **kwargs)
            if touched:
                for t in _leaves(out):
                    storage = _storage(t)
                    owner = state.param_of_storage.get(storage)
                    if owner is None:
                        if storage:
                            state.derived.add(storage)
                            state.keep.append(t)
                    elif any(_storage(o) != storage and (_storage(o) in state.derived
                                                         or _storage(o) in state.param_of_storage) for o in inputs):
                        state.derived_params.add(owner)  # a parameter written from perturbed values
            for t in _leaves(out):
                if isinstance(t, parameter):
                    state.note(t)
            return out

    with Mode():
        yield state


def construct(build: Any, seed: int | None) -> Any:
    """``build()`` (a model's constructor call), under the perturbation of ``seed``; None: as is."""
    if seed is None:
        return build()
    with perturbed_construction(seed) as state:
        model = build()
    if hasattr(model, "parameters"):
        state.finish(model)
    return model
