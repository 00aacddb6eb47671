"""What the reference and the candidate roles both do with torch: the device, the thread settings,
inputs from secret seeds, private copies and reseeding."""

from __future__ import annotations

import os
from typing import Any


def device_for(setup: dict[str, Any]):
    import torch

    device = torch.device(setup["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.empty(1, device=device)  # create the context before anything else
    return device


def prepare_torch(setup: dict[str, Any]) -> None:
    """What both children set alike before any timing: threads, TF32 off, and the CPU heap's policy
    (``measure.tune_cpu_heap``: the candidate's judge needs large blocks kept on the heap so its
    poison sticks; a reference whose large tensors came from fresh mmaps paid their page faults on
    every call, and identity came out 1.7x faster than its own eager baseline on the CPU, level3/8
    at its published size)."""
    import torch

    from .measure import tune_cpu_heap

    tune_cpu_heap()
    torch.set_num_threads(int(setup.get("threads", 1)))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.randn(1 << 18).sum()  # start the intra-op thread pool before any counting


def timing_switches(setup: dict[str, Any]) -> dict[str, Any]:
    return {"settle_within": float(setup.get("settle_within", 0.01)), "spin_waits": bool(setup.get("spin_waits", True)),
            "cpus": [int(c) for c in setup.get("cpus") or ()] or None, "e2e_rotations": int(setup.get("e2e_rotations", 0)),
            "host_warm_s": float(setup.get("host_warm_s", 0.0))}


def fresh_copy(values: list[Any], device) -> list[Any]:
    """A private copy for one use: a model may write into its inputs."""
    import torch

    return [v.to(device, copy=True) if isinstance(v, torch.Tensor) else v for v in values]


def make_inputs(task, seed: int, device) -> list[Any]:
    """One input set from a secret seed, made on the task's device. The reference and the
    candidate's judge both call this (the judge before any candidate code runs), so both sides hold
    the same values without shipping gigabytes through the parent."""
    import torch

    # The generators torch.manual_seed would seed, seeded directly: its CUDA half defers a seed it
    # cannot apply yet with a captured stack, which the audit guard refuses once candidate code
    # exists (the candidate's judge makes timing inputs just in time, after the import).
    torch.default_generator.manual_seed(seed)
    if torch.cuda.is_initialized():
        for generator in torch.cuda.default_generators:
            generator.manual_seed(seed)
    with device:  # factory functions in get_inputs() allocate on the task's device (fast on a GPU)
        values = task.get_inputs()
    # Seeded again from secret randomness at once: once candidate code exists (inputs made just in
    # time), torch.initial_seed() or the generator's state must not give away the input set's seed
    # (the candidate would regenerate its inputs, or draw the same "noise" for the same set).
    fresh = int.from_bytes(os.urandom(8), "little") >> 2
    torch.default_generator.manual_seed(fresh)
    if torch.cuda.is_initialized():
        for generator in torch.cuda.default_generators:
            generator.manual_seed(fresh)
    return [v.detach() if isinstance(v, torch.Tensor) else v for v in values]


def secret_reseed() -> None:
    import random

    import numpy
    import torch

    seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
    torch.manual_seed(seed)
    random.seed(os.urandom(16))
    numpy.random.seed(int.from_bytes(os.urandom(4), "little"))
