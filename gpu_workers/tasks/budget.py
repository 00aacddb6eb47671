"""What an evaluation of a task may use, decided before any of its children starts: the task's sizes
(measured once per task on the meta device by a sandboxed child, and kept), the size constants a
``max_elements`` bound scales down, the children's memory limits and the GPU memory it announces
to its GPU's ledger (``gpumemory``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..build.compile import PhaseFailure, child_env, child_failure
from ..build.toolchain import cache_root
from ..sandbox import gpumemory
from ..sandbox import process as sandbox
from ..schema import INFRASTRUCTURE, EvalRequest
from . import facts as taskfacts

# A spawned child's address-space limit (the CPU) and a reused reference child's key: a task needs
# more only when its own bytes say so.
DEFAULT_CEILING_MB = 16384
OOM_RETRIES = 2


# How a sizing is made, in its key: a sizing kept by an earlier method is made again (method 2:
# sizes computed from other constants follow them, and the FLOPs are counted; 3: a constructor that
# reads a value, which the meta device has none of, is built with its weights moved to meta; 4: the
# forward's working set is measured).
SIZING_METHOD = "4"


def sizing_path(request: EvalRequest, hardware: dict[str, Any], profile: str | None):
    return taskfacts.fact_path([request.task_hash, profile or "", str(request.max_elements or 0), hardware["key"],
                                SIZING_METHOD], "sizing")


def task_sizing(request: EvalRequest, hardware: dict[str, Any], profile: str | None) -> dict[str, Any]:
    """``{"constants": {name: value}, "bytes": {...}}`` for this task, profile and bound: kept per
    task and hardware key (torch's version is in it: meta kernels change with it), measured by a
    ``size`` child (the GPU hidden: the meta device needs none) the first time. Raises PhaseFailure
    (``runtime_error``) when the task cannot be sized or no scaling fits the bound."""
    path = sizing_path(request, hardware, profile)
    kept = taskfacts.load_fact(path)
    if isinstance(kept, dict) and "bytes" in kept and "constants" in kept:
        return {**kept, "kept": True}
    env = child_env(request, hardware, None, hide_gpu=True)
    child = sandbox.spawn("size", env_extra=env, memory_limit_mb=request.memory_limit_mb or DEFAULT_CEILING_MB,
                          address_space_limit=True)
    began = time.monotonic()
    try:
        with child:
            child.send({"task_source": request.task_source, "profile": profile,
                        "max_elements": request.max_elements})
            try:
                message = child.recv(time.monotonic() + request.run_timeout_s)
            except sandbox.ChildError as exc:
                raise child_failure(exc, child, "sizing the task", request.run_timeout_s) from None
    finally:
        child.close(wait_s=1)
    if message.get("phase") != "sized":
        error = str(message.get("error", ""))[-2000:]
        if request.max_elements:
            raise PhaseFailure("runtime_error", f"the task cannot be sized: {error}", child.log_tail())
        # at its own sizes nothing needs scaling: the evaluation runs with the default limits, and
        # the reference child reports what is wrong with the task if anything is
        sizing = {"constants": {}, "bytes": {}, "error": error, "seconds": round(time.monotonic() - began, 3)}
        taskfacts.keep_fact(path, sizing)
        return {**sizing, "kept": False}
    sizing = {"constants": {str(k): int(v) for k, v in (message.get("constants") or {}).items()},
              "bytes": dict(message.get("bytes") or {}), "seconds": round(time.monotonic() - began, 3)}
    taskfacts.keep_fact(path, sizing)
    return {**sizing, "kept": False}


def memory_limits(request: EvalRequest, sizing: dict[str, Any], kept: int, on_device: bool = False) -> dict[str, int]:
    """The children's limits in MiB: ``rss`` (the parent's watchdog, per evaluation) and ``spawn``
    (the address space a child is started with on the CPU, and a reused reference child's key). An
    explicit ``memory_limit_mb`` is both; otherwise they follow the task's own bytes."""
    if request.memory_limit_mb:
        return {"rss": int(request.memory_limit_mb), "spawn": int(request.memory_limit_mb)}
    if not sizing.get("bytes"):  # not measured (no meta kernel at a size too large to run for real)
        return {"rss": DEFAULT_CEILING_MB, "spawn": DEFAULT_CEILING_MB}
    rss = gpumemory.host_limit_mb(sizing["bytes"], request.trials, kept, request.device, on_device)
    return {"rss": rss, "spawn": max(rss, DEFAULT_CEILING_MB)}


def peak_path(request: EvalRequest, hardware: dict[str, Any], profile: str | None) -> Path:
    """Where the most GPU memory the task's trusted reference child held is kept: per task, profile,
    hardware key and the baselines it times (a compiled baseline's workspaces are the reference's)."""
    return taskfacts.fact_path([request.task_hash, profile or "", hardware["key"], ",".join(request.baselines)],
                               "gpu_peak")


def _keeps_peaks(hardware: dict[str, Any] | None) -> bool:
    return hardware is not None and hardware.get("device") == "cuda" and bool(hardware.get("key"))


def keep_reference_peak(request: EvalRequest, hardware: dict[str, Any] | None, profile: str | None,
                        peak: Any) -> None:
    """After an evaluation whose reference finished cleanly: what its allocator reserved at most,
    so later evaluations of the task announce no less (its activations and library workspaces are
    not in the meta-device sizes: DenseNet121's reference held 2.7x what was announced for it)."""
    reserved = peak.get("reserved") if isinstance(peak, dict) else None
    if _keeps_peaks(hardware) and type(reserved) is int and reserved > 0:
        taskfacts.keep_peak(peak_path(request, hardware, profile), reserved)


def announced_bytes(request: EvalRequest, sizing: dict[str, Any], kept: int, hardware: dict[str, Any] | None = None,
                    on_device: bool = False, profile: str | None = None) -> dict[str, int]:
    """What the evaluation announces to its GPU's ledger (``fp64``: whether the reference computes
    in float64 too); nothing where the task was not measured (admitted at once, and an out-of-memory
    is then its own). The reference's part is never less than what its child held in an earlier
    evaluation of the task on this hardware (``keep_reference_peak``), with a margin. Where the
    float64 reference would not fit beside the candidate on this GPU, the reference is fp32 alone:
    compared elementwise at the task's tolerance, without the float64 norm checks (the result's
    ``timing_stats["memory"]`` says so)."""
    if not sizing.get("bytes"):
        return {"reference": 0, "candidate": 0, "total": 0, "fp64": True}
    seen = taskfacts.load_peak(peak_path(request, hardware, profile)) if _keeps_peaks(hardware) else None

    def counted(fp64: bool) -> dict[str, int]:
        each = gpumemory.evaluation_bytes(sizing["bytes"], kept, fp64=fp64)
        if seen:
            each["reference"] = max(each["reference"], int(seen * (1 + gpumemory.DEFAULT_MARGIN))
                                    + gpumemory.CONTEXT_BYTES)
            each["total"] = each["reference"] + each["candidate"]
        return each

    wide = counted(True)
    ledger = ledger_for(hardware) if hardware is not None else None
    if ledger is not None and wide["total"] > ledger.usable:
        return {**counted(False), "fp64": False}
    return {**wide, "fp64": True}


def ledger_for(hardware: dict[str, Any]) -> gpumemory.GpuLedger | None:
    """This GPU's ledger (None on the CPU, or where the GPU's size is unknown)."""
    from ..sandbox.gpuslot import slot_name

    capacity = int(hardware.get("memory_bytes") or 0)
    if hardware.get("device") != "cuda" or capacity <= 0:
        return None
    return gpumemory.GpuLedger(slot_name(hardware), capacity, cache_root() / "locks")


def machine_memory_bytes() -> int | None:
    """This machine's memory as its processes can have it: the physical memory, or the cgroup's
    limit where that is lower (None where neither can be read)."""
    import os

    sizes: list[int] = []
    try:
        sizes.append(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as handle:
            text = handle.read().strip()
        if text.isdigit():
            sizes.append(int(text))
    except OSError:
        pass
    return min(sizes) if sizes else None


def fits_host(request: EvalRequest, sizing: dict[str, Any], kept: int, on_device: bool = False,
              machine_bytes: int | None = None) -> None:
    """On the CPU, where everything an evaluation holds is host memory, refuse at once a task whose
    two children and the outputs they report cannot fit this machine's memory (``gpumemory.host_bytes``)
    rather than run it into the system's out-of-memory killer, which may end a neighbour's processes
    too. Raises PhaseFailure with the bytes and the way out (``max_elements``). A task not measured on
    the meta device, or an explicit ``memory_limit_mb``, is the operator's to bound."""
    if request.device != "cpu" or request.memory_limit_mb or not sizing.get("bytes"):
        return
    machine = machine_bytes if machine_bytes is not None else machine_memory_bytes()
    if not machine:
        return
    held = gpumemory.host_bytes(sizing["bytes"], request.trials, kept, request.device, on_device)
    need = 2 * held["child"] + held["reported"]
    if need > machine:
        raise PhaseFailure("runtime_error", f"the task does not fit this machine's memory: an evaluation on the CPU "
                           f"holds about {need / 1e9:.1f} GB (the reference and the candidate child "
                           f"{held['child'] / 1e9:.1f} GB each, the outputs they report {held['reported'] / 1e9:.1f} GB) "
                           f"and the machine has {machine / 1e9:.1f} GB; scale the task down with max_elements "
                           f"(--max-elements), or give an explicit memory limit to run it anyway")


@contextmanager
def admitted(hardware: dict[str, Any], nbytes: int, wait_s: float) -> Iterator[dict[str, Any]]:
    """Hold this evaluation's announced GPU bytes on its GPU's ledger while it runs (waiting up to
    ``wait_s``, the settings' ``gpu_memory_wait_s``, for room: a queue, not the evaluation's own time,
    so a large task behind other large tasks waits its turn). Yields what the result keeps: bytes,
    seconds waited, and ``admitted`` (False on the CPU, where nothing is announced). A task larger
    than the GPU ends the evaluation with a message that gives its bytes; a GPU that never frees
    room ends it as an infrastructure failure, never the kernel's verdict."""
    ledger = ledger_for(hardware)
    if ledger is None:
        yield {"admitted": False, "bytes": nbytes}
        return
    try:
        admission = ledger.admit(nbytes, timeout_s=wait_s)
    except gpumemory.DoesNotFit as exc:
        raise PhaseFailure("runtime_error", f"the task does not fit on this GPU: {exc}") from None
    except TimeoutError as exc:
        raise PhaseFailure("runtime_error", f"{INFRASTRUCTURE}waiting for GPU memory (not the kernel's verdict): "
                           f"{exc}") from None
    try:
        yield {"admitted": True, **admission.to_dict()}
    finally:
        ledger.release(admission)


def neighbour_oom(status: str, text: str, memory: dict[str, Any]) -> bool:
    """Whether a failed evaluation's CUDA out-of-memory was another process's doing: it was admitted
    for what it announced, so its room was reserved (``gpumemory.classify_oom``)."""
    if status not in ("runtime_error", "compile_error"):
        return False
    return gpumemory.classify_oom(text, int(memory.get("bytes") or 0), bool(memory.get("admitted"))) == "neighbour"
