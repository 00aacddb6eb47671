"""What the evaluation asks of the reference child and the candidate child alike: how many weight
configurations and input sets, which timed outputs travel whole, the timing's options, and the device
as a child names it. Both children must agree on these, so they are written once."""

from __future__ import annotations

import os
from typing import Any

from ..schema import EvalRequest
from ..settings import EvaluatorSettings

INIT_CONFIGS = 2  # weight configurations, each from its own seed: the last correctness trial runs under the second
CUDA_FRESH = 120  # CUDA: input sets of the timing's main iterations, each timed once (no repeats)
E2E_ROTATIONS = 40  # CUDA: input sets only the timing's end-to-end iterations see (timing.time_callable)
CUDA_WHOLE = 3  # CUDA: of each kind, the first this many input sets' outputs are kept whole; all are fingerprinted


def rotations_for(device: str) -> int:
    """Input sets the timing cycles through, each made from its own secret seed when the timing
    reaches it and never before, and every one of its outputs checked (a fingerprint against the
    reference's for the same set; whole where ``kept_rotations`` says). Every timed iteration gets a
    set it has never seen: nothing to cache, and no later call's input exists for an earlier call
    to compute ahead (super-batching). On CUDA the main iterations have ``CUDA_FRESH`` sets, the
    end-to-end iterations ``E2E_ROTATIONS`` of their own."""
    return CUDA_FRESH + E2E_ROTATIONS if device == "cuda" else 24


def compares_on_device(request: EvalRequest, sizing: dict[str, Any], settings: EvaluatorSettings) -> bool:
    """Whether the candidate's outputs are compared by the reference child where they are (on a GPU
    through CUDA IPC, child/handover.py; on the CPU handed over by value) rather than sent to the
    parent: for outputs larger than the operator's ``device_compare_bytes`` (a task not measured on
    the meta device is not)."""
    output_bytes = int((sizing.get("bytes") or {}).get("output_bytes", -1))
    return output_bytes >= 0 and output_bytes > settings.device_compare_bytes


def kept_rotations(device: str, on_device: bool = False) -> list[int]:
    """The input sets whose timed outputs travel whole to the parent (GPU-sized outputs are too
    large to keep for every set: the rest are checked by fingerprint; where outputs are compared on
    the device, none travels)."""
    if on_device:
        return []
    if device != "cuda":
        return list(range(rotations_for(device)))
    return list(range(CUDA_WHOLE)) + list(range(CUDA_FRESH, CUDA_FRESH + min(CUDA_WHOLE, E2E_ROTATIONS)))


def fingerprinted_later(device: str, on_device: bool = False) -> bool:
    """Whether the reference fingerprints the input sets not kept whole only once the candidate's
    timing has named the sets it reached (its child kept for the candidate phase: ``Checker``),
    rather than all of them before: wherever some set is not kept whole."""
    return len(kept_rotations(device, on_device)) < rotations_for(device)


def max_timed_iterations(device: str) -> int:
    return CUDA_FRESH if device == "cuda" else rotations_for(device)


def timing_options(hardware: dict[str, Any], settings: EvaluatorSettings) -> dict[str, Any]:
    """The operator's timing settings, handed to every child that times (reference and candidate):
    ``settle_within`` (how precisely a timing's median must be known, relative, at 95%, before it
    stops early; looser holds each GPU alone for less time, the budget caps it either way) and
    ``cpus``: with ``timing_cpus="gpu-local"`` the timing thread runs on the CPUs of the GPU's own NUMA
    node while it times (where the machine has more than one node; default: anywhere); ``host_warm_s``
    (how long a host-bound timing may run the forward before its timed iterations, until its host
    time is steady: ``timing.time_callable``). A CUDA timing always spins on the GPU
    (timinghost.SpinWaits)."""
    options: dict[str, Any] = {"settle_within": settings.settle_within, "spin_waits": True,
                               "e2e_rotations": E2E_ROTATIONS, "host_warm_s": settings.host_warm_s}
    if settings.timing_cpus == "gpu-local":
        mine = os.sched_getaffinity(0)
        local = set((hardware.get("gpu") or {}).get("local_cpus") or ()) & mine
        if local and local != mine:
            options["cpus"] = sorted(local)
    return options


def device_string(request: EvalRequest) -> str:
    # The child sees only the GPU it was given, as device 0.
    return "cuda:0" if request.device == "cuda" else "cpu"


# Timed iterations per round. CUDA: with the end-to-end iterations between them some 16 forward
# calls, tens of milliseconds for a host-bound L3 forward (ViT: 2 ms a call) to a few hundred
# (DenseNet121: 12 ms), well inside the stretches over which the host's speed moves. The CPU: a
# timing has 24 input sets, so six rounds.
PAIR_EVERY = {"cuda": 12, "cpu": 4}


def pairs(device: str, enabled: bool) -> bool:
    """Whether the reference child stays through the candidate phase to time a pair with it
    (``pairing.py``) where nothing else keeps it: on the CPU, where every timing is the host's (on
    CUDA the timed sets' fingerprints always keep it)."""
    return enabled and device == "cpu"


def pair_every(device: str, stays: bool, baselines: dict[str, Any], enabled: bool) -> int:
    """How many iterations a round of the candidate's timing has (0: not paired). Paired where the
    reference child stays through the candidate phase (``stays``) and the task's eager baseline is
    the host's time: on the CPU always, on CUDA where its reward's time came from the host series (a kernel-side
    time is the GPU's, steady from process to process). There the kept baseline carries another
    stretch's host speed."""
    if not enabled or not stays or device not in PAIR_EVERY:
        return 0
    stats = (baselines.get("eager") or {}).get("stats") or {}
    return PAIR_EVERY[device] if device == "cpu" or stats.get("timed") == "host" else 0
