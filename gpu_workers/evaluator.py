"""One evaluation: static checks → compile → reference → candidate → verdict → reward.

The parent (this module and ``pipeline/``) never imports task or candidate code and never initialises
CUDA. Each phase that runs code runs in its own child (see ``sandbox.process`` and ``child``); the
phases' parts are in ``pipeline/`` (plan, accounting, reference, candidate, verdict), this module runs
them in order: sizing and GPU admission, then the compile, the reference and the candidate child's
warm-up side by side, then the candidate, the verdict and the reward.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

from .build.compile import PhaseFailure, build_context, compile_candidate
from .hardware import hardware_info
from .pipeline import plan
from .pipeline.accounting import CpuUse, Timeline, progress
from .pipeline.candidate import Forged, run_candidate, spawn_candidate, warm_candidate
from .pipeline.plan import compares_on_device
from .pipeline.reference import run_reference
from .pipeline.verdict import finish, judge_evidence
from .reward import resolve_reward_config
from .rules import default_rule_set, static_scan, validate_rule_set
from .sandbox import process as sandbox
from .sandbox.gpuslot import SlotUse
from .schema import INFRASTRUCTURE, EvalRequest, EvalResult, Finding
from .settings import EvaluatorSettings, current
from .tasks import KernelFileError, validate_kernel_source, validate_task_source
from .tasks import budget as taskbudget


def evaluate(request: EvalRequest, settings: EvaluatorSettings | None = None) -> EvalResult:
    """Evaluate one candidate under ``settings`` (default: this process's, ``settings.current()``).
    Raises TaskError only for an unusable task file. A CUDA out-of-memory
    in an evaluation that was admitted for what it announced is a neighbour's doing: evaluated
    again (``taskbudget.OOM_RETRIES`` times), and if it persists the result says it is an
    infrastructure failure, not the kernel's verdict."""
    settings = current() if settings is None else settings
    retries: list[str] = []
    while True:
        result = _evaluate_once(request, settings)
        memory = result.timing_stats.get("memory") or {}
        if not taskbudget.neighbour_oom(result.status, f"{result.message}\n{result.run_log}", memory):
            break
        retries.append(result.message[:300])
        if len(retries) > taskbudget.OOM_RETRIES:
            result.message = (f"{INFRASTRUCTURE}a CUDA out-of-memory caused by another process on the GPU, "
                              f"{len(retries)} times (not the kernel's verdict): {result.message}")
            break
    if retries:
        result.timing_stats["retries"] = retries
    return result


def _evaluate_once(request: EvalRequest, settings: EvaluatorSettings) -> EvalResult:
    started = time.monotonic()
    rule_set = validate_rule_set(request.rule_set or default_rule_set(request.track))
    reward_cfg = resolve_reward_config(request.reward_config)
    info = validate_task_source(request.task_source)
    profile = request.profile or (request.device if request.device in info.profiles else None)
    hardware: dict[str, Any] | None = None

    def stop(status: str, message: str, findings: list[Finding] | None = None, **fields: Any) -> EvalResult:
        return finish(EvalResult(status=status, message=message, **fields), findings or [], request,
                       rule_set, reward_cfg, started, hardware, settings)

    try:
        validate_kernel_source(request.kernel_source)
    except KernelFileError as exc:
        return stop("compile_error", str(exc))
    static = static_scan(request.kernel_source, rule_set)
    if any(f.severity == "reject" for f in static):
        return stop("rejected", "; ".join(f"{f.rule}: {f.message}" for f in static if f.severity == "reject")[:2000],
                    static)
    try:
        hardware = hardware_info(request.device, request.gpu_index)
    except RuntimeError as exc:
        return stop("runtime_error", str(exc))
    compile_ms, compile_log, run_log = None, "", ""
    slot = SlotUse()
    timeline = Timeline(started, request.task_name or request.kernel_hash[:12])
    cpu = CpuUse()
    own_cpu = time.thread_time()
    candidate_child: sandbox.Child | None = None
    reference: dict[str, Any] = {}
    budget: dict[str, Any] = {}
    admission = ExitStack()
    try:
        sizing = taskbudget.task_sizing(request, hardware, profile)
        timeline.mark("sizing: kept" if sizing.get("kept") else "sizing: measured")
        # Input sets are made one at a time (isolation.JustInTime); of the timed outputs only the kept
        # sets' stay whole, the rest are fingerprints; GPU-sized outputs stay on the device.
        on_device = compares_on_device(request, sizing, settings)
        kept = len(plan.kept_rotations(request.device, on_device))
        limits = taskbudget.memory_limits(request, sizing, kept, on_device)
        announced = taskbudget.announced_bytes(request, sizing, kept, hardware, on_device, profile)
        budget["sizing"] = {k: sizing[k] for k in ("constants", "bytes", "error") if k in sizing}
        budget["memory"] = {"limits_mb": limits, "announced": announced, "admitted": False, "on_device": on_device}
        taskbudget.fits_host(request, sizing, kept, on_device)
        budget["memory"].update(admission.enter_context(taskbudget.admitted(hardware, announced["total"],
                                                                                 settings.gpu_memory_wait_s)))
        timeline.mark("gpu memory: admitted" if budget["memory"]["admitted"] else "gpu memory: not counted")
        build = build_context(request, hardware)
        candidate_child = spawn_candidate(request, hardware, build, limits)
        # Compiling (CPU work), the reference (trusted, device work) and the candidate child's CUDA
        # context overlap.
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="ka-phase") as phases:
            reference_job = phases.submit(run_reference, request, hardware, profile, sizing, limits, slot, timeline,
                                          cpu, settings, announced["fp64"])
            warm_job = (phases.submit(warm_candidate, request, hardware, candidate_child, slot, timeline)
                        if request.device == "cuda" else None)
            try:
                outcome = compile_candidate(request, hardware, build)
                timeline.mark("compile: done")
                cpu.add("compile", outcome.cpu_s)
            finally:
                reference_error = reference_job.exception()
                warm_error = warm_job.exception() if warm_job is not None else None
        compile_ms, compile_log = outcome.ms, outcome.log
        if reference_error is not None:
            raise reference_error
        if warm_error is not None:
            raise warm_error
        reference = reference_job.result()
        evidence, run_log = run_candidate(request, candidate_child, reference, rule_set, outcome.deferred, slot,
                                       hardware, timeline, cpu, settings)
    except PhaseFailure as failure:
        cpu.add("parent", time.thread_time() - own_cpu)
        logs = ({"compile_log": failure.log} if failure.status == "compile_error"
                else {"run_log": failure.log, "compile_log": compile_log})
        return stop(failure.status, failure.message, static, timing_stats=progress(slot, timeline, cpu, budget),
                    **logs)
    except Forged as forged:
        cpu.add("parent", time.thread_time() - own_cpu)
        findings = static + ([forged.finding] if forged.finding else [])
        return stop("rejected", forged.finding.message if forged.finding else "forged result", findings,
                    run_log=forged.log, compile_log=compile_log, timing_stats=progress(slot, timeline, cpu, budget))
    finally:
        if candidate_child is not None:
            candidate_child.close(wait_s=0)  # unused when an earlier phase ended the evaluation
        if reference.get("checker") is not None:  # the reference child kept to compare on the device
            reference["gpu_peak"] = reference.pop("checker").close()
        admission.close()  # the GPU memory it announced is free for the next evaluation
    if budget.get("memory", {}).get("admitted"):  # what was announced against what each child held at most
        budget["memory"]["peak"] = {"reference": reference.get("gpu_peak"), "candidate": evidence.gpu_peak}
        taskbudget.keep_reference_peak(request, hardware, profile, reference.get("gpu_peak"))
    timeline.mark("judge: begun")  # after the children closed and the GPU memory was given back
    judged_from = time.thread_time()
    cpu.add("parent", judged_from - own_cpu)
    result, dynamic = judge_evidence(request, rule_set, hardware, reference, evidence)
    timeline.mark("judge: done")
    cpu.add("judge", time.thread_time() - judged_from)
    result.timing_stats.update(progress(slot, timeline, cpu, budget))
    result.compile_ms = compile_ms
    result.compile_log = compile_log
    result.run_log = run_log
    if reference.get("fp64_error"):
        result.run_log = (result.run_log + "\n[judge] " + reference["fp64_error"]).strip()
    if evidence.blocked:
        # Refused and swallowed (stdlib helpers such as typing's look at frames and fall back): the
        # refusal already took away what was reached for; an uncaught one is a sandbox_violation.
        result.run_log = (result.run_log + "\n[judge] refused in candidate code: "
                          + ", ".join(sorted(set(evidence.blocked))[:8])).strip()
    return finish(result, static + dynamic, request, rule_set, reward_cfg, started, hardware, settings)

