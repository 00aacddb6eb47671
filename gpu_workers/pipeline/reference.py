"""The reference phase: the trusted reference child (``child/reference.py``) makes the inputs from
secret seeds, runs the task's ``Model`` for the reference outputs and times each baseline that is not
kept yet; the parent reads its messages in order, steps aside for waiting timers at its pause points,
and keeps what it measured (``tasks/facts.py``)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from ..build.compile import PhaseFailure, child_env, child_failure, threads_for
from ..sandbox import process as sandbox
from ..sandbox import refpool
from ..sandbox.gpuslot import GpuSlot, SlotUse, gpu_slot
from ..schema import EvalRequest
from ..settings import EvaluatorSettings
from ..tasks import facts as taskfacts
from .accounting import CpuUse, TimedSpan, Timeline
from .plan import (
    INIT_CONFIGS,
    device_string,
    kept_rotations,
    max_timed_iterations,
    rotations_for,
    timing_options,
)


def task_fact_path(request: EvalRequest, hardware: dict[str, Any], profile: str | None, name: str) -> Path:
    """Where a per-task fact measured by the trusted reference is kept: a baseline's timing, or the
    task's FLOP count (counting imports torch._dynamo, over two seconds of CPU per evaluation)."""
    return taskfacts.fact_path([request.task_hash, profile or "", hardware["key"], str(threads_for(request)),
                                str(request.timing_budget_s)], name)


def grant_alone(gpu: GpuSlot, child: sandbox.Child, timeline: Timeline, role: str) -> float:
    """A child asked for the GPU to itself (a timing): take it exclusive, then say go. Returns the
    seconds waited, which the caller adds to the child's deadline (waiting is not the child's time)."""
    waited = gpu.exclusive()
    timeline.mark(f"{role}: gpu alone")
    child.signal()
    return waited


def run_reference(request: EvalRequest, hardware: dict[str, Any], profile: str | None, sizing: dict[str, Any],
                  limits: dict[str, int], slot: SlotUse, timeline: Timeline, cpu: CpuUse,
                  settings: EvaluatorSettings) -> dict[str, Any]:
    """Inputs, reference outputs and baseline timings from the trusted reference child."""
    own_cpu = time.thread_time()
    seeds = {
        "init": [secrets.randbits(62) for _ in range(INIT_CONFIGS)],
        "trials": [(1 if (INIT_CONFIGS > 1 and request.trials > 1 and i == request.trials - 1) else 0, secrets.randbits(62))
                   for i in range(request.trials)],
        "rotations": [secrets.randbits(62) for _ in range(rotations_for(request.device))],
        "after": secrets.randbits(62),
        "fingerprint": secrets.randbits(62),
    }
    cached: dict[str, dict[str, Any]] = {}
    wanted: list[str] = []  # timed by this evaluation: not kept yet, or kept from too few evaluations
    for name in request.baselines:
        entry, settled = taskfacts.load_baseline(task_fact_path(request, hardware, profile, name))
        if entry is not None:
            cached[name] = entry
        if not settled:
            wanted.append(name)
    flops_path = task_fact_path(request, hardware, profile, "flops")
    flops_cached = taskfacts.load_flops(flops_path)
    setup = {"task_source": request.task_source, "profile": profile, "constants": sizing["constants"],
             "device": device_string(request),
             "seeds": seeds, "baselines": wanted, "count_flops": flops_cached is None,
             "timing_budget_s": request.timing_budget_s, "max_iters": max_timed_iterations(request.device),
             **timing_options(hardware, settings), "threads": threads_for(request),
             "fingerprint_seed": seeds["fingerprint"], "keep_rotations": kept_rotations(request.device),
             "atol": request.atol, "rtol": request.rtol}
    env = child_env(request, hardware, None, hide_gpu=False)
    child, reused = refpool.borrow(env, limits["spawn"])
    child.memory_limit_bytes = limits["rss"] << 20  # this evaluation's own bound (the watchdog's)
    child_cpu = (child.cpu_seconds() or 0.0) if reused else 0.0
    setup["serve"] = settings.reference_reuse  # after its done, the child waits for the next evaluation's setup
    timeline.mark("reference: reused" if reused else "reference: started")
    clean = False
    try:
        with gpu_slot(hardware, slot) as gpu:
            timeline.mark("reference: slot")
            child.send(setup)
            try:
                reference, baselines = _messages(request, hardware, profile, child, gpu, timeline,
                                                 wanted, cached, flops_cached, flops_path)
            except sandbox.ChildError as exc:
                raise child_failure(exc, child, "running the reference", request.run_timeout_s) from None
        clean = True
    finally:
        after = child.cpu_seconds()
        cpu.add("reference", after - child_cpu if after is not None else None)
        refpool.give_back(child, env, limits["spawn"], clean)
        cpu.add("parent", time.thread_time() - own_cpu)
    reference["baselines"] = baselines
    reference["seeds"] = seeds
    reference["profile"] = profile
    reference["constants"] = sizing["constants"]
    return reference


def _messages(request: EvalRequest, hardware: dict[str, Any], profile: str | None, child: sandbox.Child,
              gpu: GpuSlot, timeline: Timeline, wanted: list[str], cached: dict[str, dict[str, Any]],
              flops_cached: int | None, flops_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference child's messages, in order: pause points, its outputs, then each baseline's timing."""
    deadline = time.monotonic() + request.run_timeout_s
    message = child.recv(deadline)
    went, trial_s = time.monotonic(), 0.0  # the reference's slowest trial: what bounds the candidate's stretches
    while message.get("phase") == "checkpoint":  # a pause point: a waiting timing goes first
        step = f"reference: {message.get('step')}"
        timeline.mark(step)
        if message.get("step") == "trial":
            trial_s = max(trial_s, time.monotonic() - went)
        if message.get("step") == "outputs":  # the large message that follows is CPU work alone
            gpu.release(step)
        else:
            deadline += gpu.pause_point(step)
        child.signal()
        went = time.monotonic()
        message = child.recv(deadline)
    timeline.mark(f"reference: {message.get('phase')}")
    if message.get("phase") == "error":
        raise PhaseFailure("runtime_error", "the reference (task) failed to run: "
                           + str(message.get("error", ""))[-3000:], child.log_tail())
    deadline += gpu.shared()  # before the child's next GPU work (it waits for the go)
    child.signal()
    reference = message
    reference["trial_s"] = trial_s
    if flops_cached is not None:
        reference["flops"] = flops_cached
    elif reference.get("flops") is not None:
        taskfacts.keep_flops(flops_path, int(reference["flops"]))
    else:
        reference["flops"] = 0
    baselines = dict(cached)
    span: TimedSpan | None = None
    while True:
        message = child.recv(deadline + request.run_timeout_s * len(wanted))
        phase = message.get("phase")
        timeline.mark(f"reference: {phase} {message.get('baseline') or ''}".rstrip())
        if phase == "want_gpu":
            deadline += grant_alone(gpu, child, timeline, "reference")
        elif phase == "timing_begin":
            span = TimedSpan(child)
        elif phase == "timing_end":
            wall, waited = span.end() if span is not None else (None, None)
            deadline += gpu.shared()  # the child waits for this before its next GPU work
            child.signal()
            stats = message["stats"]
            # the loop's own cost per iteration, less what the host's load added meanwhile
            overhead = ((wall - (waited or 0.0) - stats["total_ms"]) / stats["iterations"]) if wall else None
            entry = {"stats": stats, "wall_ms": wall, "descheduled_ms": waited, "overhead_ms_per_iter": overhead}
            path = task_fact_path(request, hardware, profile, message["baseline"])
            baselines[message["baseline"]] = taskfacts.keep_baseline(path, entry)  # the fastest kept
        elif phase == "baseline_failed":
            gpu.shared()  # it may have failed while timing
            if message["baseline"] not in cached:  # a kept timing stands
                baselines[message["baseline"]] = {"error": message.get("error", "")}
        elif phase == "done":
            gpu.release("reference: done")
            return reference, baselines
        elif phase == "error":
            raise PhaseFailure("runtime_error", "the reference failed: " + str(message.get("error"))[-3000:],
                               child.log_tail())
