"""The compile phase: building a candidate's extensions apart from running it.

Compiling is CPU work and is pooled apart from GPU work: the candidate's module is imported in a
child with the GPU hidden, so ``load_inline`` builds into a content-addressed folder (source hash +
toolchain + architecture) that the run phase then loads from. Concurrent builds of the same source
share the folder safely (torch's baton, held on a live lock: ``baton``); different sources never collide.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..hardware import child_cpus, cuda_arch_list, visible_device
from ..sandbox import process as sandbox
from ..schema import EvalRequest
from ..settings import current
from .pch import pch_dir, pch_enabled
from .toolchain import cache_root, extension_dir, needs_build, toolchain_id


class PhaseFailure(Exception):
    """A phase ended the evaluation: status, a message for people, and the log that explains it."""

    def __init__(self, status: str, message: str, log: str = ""):
        super().__init__(message)
        self.status = status
        self.message = message
        self.log = log


def threads_for(request: EvalRequest) -> int:
    """Intra-op threads for the kernel and the baselines alike (one on the CPU: stable and fair)."""
    return int(request.extra.get("threads", 1 if request.device == "cpu" else min(4, os.cpu_count() or 1)))


@dataclass
class BuildContext:
    """Where a candidate's extensions live and which precompiled headers serve them."""

    ext_dir: Path | None
    pch: Path | None  # torch's header (a fallback plain build)
    lite_pch: Path | None = None  # the light build's stand-in header


def build_context(request: EvalRequest, hardware: dict[str, Any]) -> BuildContext:
    if not needs_build(request.kernel_source):
        return BuildContext(None, None)
    ext = extension_dir(request.kernel_source, request.device, cuda_arch_list(hardware))
    if not (pch_enabled() and "load_inline" in request.kernel_source):
        return BuildContext(ext, None)
    # never waited for here: a header not built yet is built in the background (a worker's warm-up
    # builds both), and this build goes without
    return BuildContext(ext, pch_dir(cache_root(), request.device, wait=False),
                        pch_dir(cache_root(), request.device, wait=False, kind="lite"))


# CPU children start with glibc's per-thread cache off (read at exec, so it is part of the process's
# environment; the zygote is kept per value: sandbox.zygote). torch aligns its CPU blocks to 64 bytes,
# and the few bytes glibc splits off in front of a block land in that cache, whose chunks are never
# merged with their neighbours: a freed output-sized block stays fenced in, too small by the
# alignment's slack for the next block of its size, and every call took fresh pages from the top of
# the heap. Whether that happened depended on where the process's heap stood: the same 64K-element
# forward ran 0.035 ms in some processes and 0.13-0.17 ms (64 page faults a call) in others, so a
# baseline and its identity differed by up to 4x on the CPU. With the cache off 28 of 28 processes
# ran it at 0.037-0.053 ms (fastbins, which glibc merges before every large block, take the bytes);
# a small op's host time is about 7% longer.
CPU_HEAP_TUNABLES = "glibc.malloc.tcache_count=0"


def child_env(request: EvalRequest, hardware: dict[str, Any], build: BuildContext | None, *,
              hide_gpu: bool) -> dict[str, str]:
    threads = str(threads_for(request))
    # A baseline's torch.compile starts this many compile workers (processes that each import torch)
    # rather than one per core: sixteen evaluations compiling at once on sixteen cores would start 256.
    env: dict[str, str] = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TORCHINDUCTOR_COMPILE_THREADS": threads}
    if build is not None and build.ext_dir is not None:
        env["TORCH_EXTENSIONS_DIR"] = str(build.ext_dir)
    if build is not None and build.pch is not None:
        env["CPATH"] = str(build.pch)
    if build is not None and build.lite_pch is not None:
        env["KERNELCOURT_LITE_PCH"] = str(build.lite_pch)
    env["MAX_JOBS"] = str(request.extra.get("max_jobs", os.cpu_count() or 1))
    if request.device == "cuda":
        arch = cuda_arch_list(hardware)
        if arch:
            env["TORCH_CUDA_ARCH_LIST"] = arch
        env["CUDA_VISIBLE_DEVICES"] = "" if hide_gpu else visible_device(request.gpu_index)
        cpus = child_cpus(hardware)
        if cpus:  # the GPUs' timing CPUs left to the timings (child.harden.keep_to_cpus)
            env["KERNELCOURT_CHILD_CPUS"] = ",".join(map(str, cpus))
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env["GLIBC_TUNABLES"] = CPU_HEAP_TUNABLES
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_root() / "inductor")
    env["TRITON_CACHE_DIR"] = str(cache_root() / "triton")
    env.update(current().child_env())  # the cache (the light-build bridge lives there), the build paths
    env[f"KERNELCOURT_TOOLCHAIN_{request.device.upper()}"] = toolchain_id(request.device)  # names the bridge
    return env


def child_failure(exc: sandbox.ChildError, child: sandbox.Child, what: str, limit_s: float) -> PhaseFailure:
    if exc.kind == "timeout":
        return PhaseFailure("timeout", f"{what} did not finish within {limit_s:.0f} s", child.log_tail())
    return PhaseFailure("runtime_error", f"{what}: {exc}", child.log_tail())


@dataclass
class CompileOutcome:
    ms: float | None
    deferred: bool  # the import failed for a reason other than a build: the run phase will tell
    log: str
    cpu_s: float | None = None  # the compile child's CPU seconds, its compilers' included


def compile_candidate(request: EvalRequest, hardware: dict[str, Any], build: BuildContext) -> CompileOutcome:
    """Build the candidate's extensions with the GPU hidden; raises PhaseFailure on a build error.

    One compile per source folder at a time (an ``flock`` the kernel drops if we die): a concurrent
    evaluation of the same source waits, then finds the build done. Nothing a dead process left
    holds a build back: the children's builds take torch's batons on live locks (``build.baton``)."""
    if build.ext_dir is None:
        return CompileOutcome(None, False, "")
    asked = time.monotonic()
    with open(build.ext_dir / ".ka-build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        locked = time.monotonic()
        note = ""  # torch's own batons inside are held on live locks too (build.baton)
        done_marker = build.ext_dir / "compiled.ok"  # the folder is this exact source's: built once is built
        if done_marker.exists():
            return CompileOutcome(0.0, False, note + "[judge] built earlier from the same source and toolchain")
        outcome = compile_in_child(request, hardware, build)
        if outcome.ms is not None and not outcome.deferred:
            done_marker.touch()
        note += (f"[judge] compile phase {time.monotonic() - asked:.2f} s: build lock {locked - asked:.2f} s, "
                 f"compile child {outcome.ms / 1e3 if outcome.ms is not None else float('nan'):.2f} s\n")
        outcome.log = note + outcome.log
        return outcome


# ---- spare compile children ----------------------------------------------------------------------------
# Starting Python and importing torch costs a compile child seconds before it compiles anything. We
# keep spares that have done so and wait for work: a compile takes one (or starts one if none is
# ready) and starts its replacement, so the next compile finds it ready. Each child still compiles
# exactly one candidate; a spare has run no candidate code. What differs per build (extensions folder,
# precompiled header, architectures, jobs) travels in the setup and is applied before the candidate's
# code runs.
_PER_BUILD_ENV = ("TORCH_EXTENSIONS_DIR", "CPATH", "KERNELCOURT_LITE_PCH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS",
                  "OMP_NUM_THREADS", "MKL_NUM_THREADS", "KERNELCOURT_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                  "KERNELCOURT_TOOLCHAIN_CPU", "KERNELCOURT_TOOLCHAIN_CUDA")
_spares: list[tuple[int, sandbox.Child]] = []  # (the process that started it, the child)
_spares_lock = threading.Lock()
_in_flight = [0]  # compiles running in this process: keep one spare more than that ready


def compile_nice() -> int:
    """How much lower the compile child (and the compilers it runs) is scheduled than the rest of an
    evaluation (``EvaluatorSettings.compile_nice``). Compiles are the bulk of the CPU work and wait
    for nobody; the children that time kernels or feed the GPU should get a core first when there are
    more runnable processes than cores."""
    return current().compile_nice


def max_spares() -> int:
    return current().compile_spares


def _spawn_compile_child() -> sandbox.Child:
    env = {"CUDA_VISIBLE_DEVICES": "", "TORCHINDUCTOR_CACHE_DIR": str(cache_root() / "inductor"),
           "TRITON_CACHE_DIR": str(cache_root() / "triton")}
    return sandbox.spawn("compile", env_extra=env)


def _take_compile_child(memory_limit_mb: int) -> tuple[sandbox.Child, bool]:
    """A compile child (a ready spare when there is one) and whether it was a spare."""
    child = None
    me = os.getpid()
    with _spares_lock:
        _spares[:] = [(pid, c) for pid, c in _spares if pid == me]  # a forked worker starts its own
        while _spares and child is None:
            _, candidate = _spares.pop()
            if candidate.proc.poll() is None:
                child = candidate
            else:
                candidate.close(wait_s=0.1)
        while len(_spares) < min(max_spares(), _in_flight[0] + 1):
            _spares.append((me, _spawn_compile_child()))  # the next compiles', starting now
    spare = child is not None
    if child is None:
        child = _spawn_compile_child()
    child.memory_limit_bytes = memory_limit_mb * (1 << 20) if memory_limit_mb else 0
    return child, spare


def close_spares() -> None:
    with _spares_lock:
        while _spares:
            pid, child = _spares.pop()
            if pid == os.getpid():
                child.close(wait_s=0.5)


atexit.register(close_spares)


def compile_in_child(request: EvalRequest, hardware: dict[str, Any], build: BuildContext) -> CompileOutcome:
    """Run the request's module in a compile child (a spare when one is ready), no build lock."""
    started = time.monotonic()
    with _spares_lock:
        _in_flight[0] += 1
    try:
        child, spare = _take_compile_child(request.memory_limit_mb or 16384)  # compilers: not the task's bytes
        return _run_compile_child(request, hardware, build, child, spare, started)
    finally:
        with _spares_lock:
            _in_flight[0] -= 1


def _run_compile_child(request: EvalRequest, hardware: dict[str, Any], build: BuildContext, child: sandbox.Child,
                       spare: bool, started: float) -> CompileOutcome:
    env = child_env(request, hardware, build, hide_gpu=True)
    with child:
        setup_env: dict[str, str | None] = {k: v for k, v in env.items() if k in _PER_BUILD_ENV}
        setup_env.update(current().child_env())
        child.send({"kernel_source": request.kernel_source, "env": setup_env, "spare": spare,
                    "device": request.device, "nice": compile_nice()})
        try:
            message = child.recv(time.monotonic() + request.compile_timeout_s, max_bytes=1 << 20)
        except sandbox.ChildError as exc:
            raise child_failure(exc, child, "compiling the kernel", request.compile_timeout_s) from None
        cpu_s = child.cpu_seconds()
        log = ("[judge] compiled in a spare child (Python and torch already started)\n" if spare else "") + child.log_tail()
    if message.get("phase") == "compiled":
        return CompileOutcome((time.monotonic() - started) * 1e3, False, log, cpu_s)
    error = str(message.get("error", ""))
    if message.get("build_error"):
        raise PhaseFailure("compile_error", "the kernel's extension failed to build", (log + "\n" + error)[-8000:])
    return CompileOutcome(None, True, (log + "\n" + error)[-8000:], cpu_s)
