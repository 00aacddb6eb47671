"""A worker's start-up work, done before its first evaluation instead of during it.

Every first evaluation of a fresh worker process waits for the same things: the GPU probe, this
process's zygote (a Python with torch imported, which forks every child), ready compile children,
and the light-build bridge (built once per toolchain into the shared cache, loaded by each compile
child). ``warm_up`` does them all once, with no candidate code anywhere: the compile child runs an
empty module of ours. A Ray evaluator actor warms itself when it starts; a Celery worker process
does so when ``KERNELCOURT_WARM_UP`` names its device (``cuda`` or ``cpu``).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from ..settings import current

WARM_UP_SOURCE = "# the worker's warm-up: no candidate code here; the compile child loads or builds the bridge\n"


def warm_up(device: str, gpu_index: int | None = None, references: int = 0,
            gpus: Sequence[int] | None = None) -> dict[str, float]:
    """Seconds each step took: ``probe`` (the GPU or CPU facts), ``compile_child`` (the zygote, a
    compile child and its spare, the bridge), ``references`` (with ``references`` > 0: that many
    reference children started on each GPU, their CUDA contexts made, kept for the first
    evaluations: as many as the worker runs at once there), ``pch`` (the light build's header and
    torch's, for a fallback plain build, precompiled; ``KERNELCOURT_PCH=0`` skips them).

    ``gpus``: every GPU the worker spreads its CUDA evaluations over (a pool on several GPUs, a Celery
    worker with EVAL_GPUS); each is probed and gets its reference children, so the first evaluation
    sent to the second GPU waits no more than one sent to the first. Default: ``gpu_index`` alone.
    Raises RuntimeError when a step fails."""
    from ..build.compile import BuildContext, child_env, compile_in_child
    from ..build.pch import pch_dir, pch_enabled
    from ..build.toolchain import cache_root, extension_dir
    from ..hardware import cuda_arch_list, hardware_info
    from ..sandbox import refpool
    from ..schema import EvalRequest
    from ..tasks.budget import DEFAULT_CEILING_MB

    indices: list[int | None] = list(gpus) if device == "cuda" and gpus else [gpu_index]
    steps: dict[str, float] = {}
    pch = pch_enabled()
    if pch:  # built on threads meanwhile: they and the bridge are each one compiler on one core
        pch_dir(cache_root(), device, wait=False)
        pch_dir(cache_root(), device, wait=False, kind="lite")
    started = time.monotonic()
    with cf.ThreadPoolExecutor(len(indices)) as executor:  # each probe is a process of its own: together
        hardwares = list(executor.map(lambda index: hardware_info(device, index), indices))
    steps["probe"] = time.monotonic() - started
    mark = time.monotonic()
    requests = [EvalRequest(task_source="", kernel_source=WARM_UP_SOURCE, device=device, gpu_index=index,
                            compile_timeout_s=900.0) for index in indices]
    request, hardware = requests[0], hardwares[0]  # one build serves every GPU of the kind
    # a build folder of its own, as a candidate's build has: the child then loads (or builds) the bridge
    folder = extension_dir(WARM_UP_SOURCE, device, cuda_arch_list(hardware))
    outcome = compile_in_child(request, hardware, BuildContext(folder, None))
    if outcome.ms is None:
        raise RuntimeError(f"the warm-up compile child failed:\n{outcome.log[-4000:]}")
    steps["compile_child"] = time.monotonic() - mark
    if references > 0:  # the same environment an evaluation's reference child gets (pipeline/reference.py)
        mark = time.monotonic()

        def prestart(pair: tuple[EvalRequest, dict[str, Any]]) -> int:
            # the child sees its one GPU (CUDA_VISIBLE_DEVICES) as cuda:0
            return refpool.prestart(child_env(pair[0], pair[1], None, hide_gpu=False),
                                    pair[0].memory_limit_mb or DEFAULT_CEILING_MB, references,
                                    "cuda:0" if device == "cuda" else "cpu", pair[1])

        with cf.ThreadPoolExecutor(len(indices)) as executor:  # each GPU's under its own slot
            list(executor.map(prestart, zip(requests, hardwares)))
        steps["references"] = time.monotonic() - mark
    if pch:  # the headers (once per toolchain): what is left of their builds
        mark = time.monotonic()
        pch_dir(cache_root(), device, kind="lite")
        pch_dir(cache_root(), device)
        steps["pch"] = time.monotonic() - mark
    return steps


def warm_up_in_background(device: str, gpu_index: int | None = None, who: str = "worker",
                          references: int = 0, gpus: Sequence[int] | None = None) -> threading.Thread:
    """``warm_up`` on a daemon thread; what it did (or why it could not) goes to stderr. Evaluations
    may start meanwhile: they share what it has made so far (the zygote and bridge have their locks)."""

    def run() -> None:
        try:
            steps = warm_up(device, gpu_index, references, gpus)
            done = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps.items())
            print(f"[kernelcourt] {who} {os.getpid()} warmed up for {device}: {done}", file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 - a warm-up that fails leaves the first evaluation to do it
            print(f"[kernelcourt] {who} {os.getpid()} could not warm up for {device}: {exc}"[:4000],
                  file=sys.stderr, flush=True)

    thread = threading.Thread(target=run, name="kernelcourt-warm-up", daemon=True)
    thread.start()
    return thread


def configured_device(value: Any = None) -> str | None:
    """The device named by ``value``, else by ``EvaluatorSettings.warm_up`` (``cuda``, ``cpu``; empty or
    ``0``: none)."""
    name = str(current().warm_up if value is None else value).strip().lower()
    if name in ("", "0", "no", "off", "none"):
        return None
    if name not in ("cuda", "cpu"):
        raise ValueError(f"KERNELCOURT_WARM_UP must be cuda, cpu or empty, not {name!r}")
    return name
