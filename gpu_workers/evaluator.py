"""One evaluation: static checks → compile → reference → candidate → verdict → reward.

The parent (this module) never imports task or candidate code and never initialises CUDA. Each
phase that runs code runs in its own child (see ``sandbox.process`` and ``child``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import Any

from . import judge
from .build.compile import (
    BuildContext,
    PhaseFailure,
    build_context,
    child_env,
    child_failure,
    compile_candidate,
    threads_for,
)
from .child import spread
from .hardware import ceilings, hardware_info
from .reward import compute_reward, resolve_reward_config
from .rules import default_rule_set, make_finding, static_scan, validate_rule_set
from .sandbox import process as sandbox
from .sandbox import refpool
from .sandbox.gpuslot import GpuSlot, SlotUse, gpu_slot, hold_bound
from .schema import EvalRequest, EvalResult, Finding
from .settings import EvaluatorSettings, current
from .tasks import KernelFileError, validate_kernel_source, validate_task_source
from .tasks import budget as taskbudget
from .tasks import facts as taskfacts

INIT_CONFIGS = 2


# The review line for a speedup over eager is this many times higher while the task's eager
# baseline rests on fewer timings than it keeps (taskfacts.samples()): a fresh reference process's
# first timing has come out 3.7x slow on the CPU (0.48 against 0.13 ms), which alone carried an honest
# 2.5x kernel past a 10x line. A speedup beyond even this is flagged at once.
UNSETTLED_LINE = 4.0
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


def kept_rotations(device: str) -> list[int]:
    """The input sets whose timed outputs travel whole to the parent (GPU-sized outputs are too
    large to keep for every set: the rest are checked by fingerprint)."""
    if device != "cuda":
        return list(range(rotations_for(device)))
    return list(range(CUDA_WHOLE)) + list(range(CUDA_FRESH, CUDA_FRESH + min(CUDA_WHOLE, E2E_ROTATIONS)))


def max_timed_iterations(device: str) -> int:
    return CUDA_FRESH if device == "cuda" else rotations_for(device)


def timing_options(hardware: dict[str, Any], settings: EvaluatorSettings) -> dict[str, Any]:
    """The operator's timing settings, handed to every child that times (reference and candidate):
    ``settle_within`` (how precisely a timing's median must be known, relative, at 95%, before it
    stops early; looser holds each GPU alone for less time, the budget caps it either way) and
    ``cpus``: with ``timing_cpus="gpu-local"`` the timing thread runs on the CPUs of the GPU's own NUMA
    node while it times (where the machine has more than one node; default: anywhere). A CUDA timing
    always spins on the GPU (timinghost.SpinWaits)."""
    options: dict[str, Any] = {"settle_within": settings.settle_within, "spin_waits": True,
                               "e2e_rotations": E2E_ROTATIONS}
    if settings.timing_cpus == "gpu-local":
        mine = os.sched_getaffinity(0)
        local = set((hardware.get("gpu") or {}).get("local_cpus") or ()) & mine
        if local and local != mine:
            options["cpus"] = sorted(local)
    return options


class Timeline:
    """Seconds since the evaluation began at which each phase and child message arrived (kept with
    the result: where an evaluation's time went)."""

    def __init__(self, started: float):
        self._started = started
        self.events: list[list[Any]] = []

    def mark(self, label: str) -> None:
        self.events.append([label, round(time.monotonic() - self._started, 3)])


class CpuUse:
    """CPU seconds an evaluation cost, by who spent them (kept with the result: what sizes a node).
    Children are read from /proc just after their last report (the compile child with its compilers;
    the candidate's exit and a fresh child's fork are not in it); a reference child kept between
    evaluations counts only what it did for this one. ``parent``: this process's threads working for
    the evaluation (decoding the children's messages, starting children), ``judge`` the verdict."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    def add(self, who: str, seconds: float | None) -> None:
        if seconds is not None and seconds >= 0:
            with self._lock:
                self.seconds[who] = self.seconds.get(who, 0.0) + seconds

    def to_dict(self) -> dict[str, float]:
        with self._lock:
            out = {k: round(v, 3) for k, v in self.seconds.items()}
        if out:
            out["total"] = round(sum(out.values()), 3)
        return out


class _TimedSpan:
    """The parent's own view of a child's timing, from its ``timing_begin`` to its ``timing_end``:
    the wall-clock milliseconds, and how many of them the child's timing thread spent waiting for a
    CPU (runnable, not running: a busy host's doing, which no GPU work and no forged timer explains)."""

    def __init__(self, child: sandbox.Child):
        self._pid = child.proc.pid
        self._began = time.monotonic()
        self._delay = sandbox.run_delay_seconds(self._pid)

    def end(self) -> tuple[float, float | None]:
        wall_ms = (time.monotonic() - self._began) * 1e3
        delay = sandbox.run_delay_seconds(self._pid)
        waited = (delay - self._delay) * 1e3 if delay is not None and self._delay is not None else None
        return wall_ms, (min(max(waited, 0.0), wall_ms) if waited is not None else None)


# ---- phases ----------------------------------------------------------------------------------
def _baseline_stats(entry: dict[str, Any]) -> dict[str, Any]:
    """A baseline's timing as a result shows it: the kept sample that stands (tasks/facts.py), every kept
    sample's median and their spread."""
    if not entry.get("stats"):
        return {"error": entry.get("error")}
    return {**entry["stats"], "samples_ms": entry.get("samples_ms"), "samples_spread": entry.get("samples_spread")}


def _speedup_intervals(request: EvalRequest, timing: dict[str, Any], baselines: dict[str, Any]) -> dict[str, Any]:
    """Each speedup's 95% interval: the kernel's median interval against the baseline's (across its
    kept evaluations where three or more are kept, else within its one timing)."""
    out: dict[str, Any] = {}
    for name in request.baselines:
        entry = baselines.get(name) or {}
        kept = entry.get("samples_spread") or {}
        side = kept if kept.get("samples", 0) >= 3 else (entry.get("stats") or {}).get("spread_ms")
        out[name] = spread.speedup_interval(side, timing.get("spread_ms"))
    return out


def _task_fact_path(request: EvalRequest, hardware: dict[str, Any], profile: str | None, name: str) -> Path:
    """Where a per-task fact measured by the trusted reference is kept: a baseline's timing, or the
    task's FLOP count (counting imports torch._dynamo, over two seconds of CPU per evaluation)."""
    return taskfacts.fact_path([request.task_hash, profile or "", hardware["key"], str(threads_for(request)),
                                str(request.timing_budget_s)], name)


def _reference(request: EvalRequest, hardware: dict[str, Any], profile: str | None, sizing: dict[str, Any],
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
        entry, settled = taskfacts.load_baseline(_task_fact_path(request, hardware, profile, name))
        if entry is not None:
            cached[name] = entry
        if not settled:
            wanted.append(name)
    flops_path = _task_fact_path(request, hardware, profile, "flops")
    flops_cached = taskfacts.load_flops(flops_path)
    setup = {"task_source": request.task_source, "profile": profile, "constants": sizing["constants"],
             "device": _device_string(request),
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
                reference, baselines = _reference_messages(request, hardware, profile, child, gpu, timeline,
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


def _grant_alone(gpu: GpuSlot, child: sandbox.Child, timeline: Timeline, role: str) -> float:
    """A child asked for the GPU to itself (a timing): take it exclusive, then say go. Returns the
    seconds waited, which the caller adds to the child's deadline (waiting is not the child's time)."""
    waited = gpu.exclusive()
    timeline.mark(f"{role}: gpu alone")
    child.signal()
    return waited


def _reference_messages(request: EvalRequest, hardware: dict[str, Any], profile: str | None,
                        child: sandbox.Child, gpu: GpuSlot, timeline: Timeline, wanted: list[str],
                        cached: dict[str, dict[str, Any]], flops_cached: int | None,
                        flops_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
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
    span: _TimedSpan | None = None
    while True:
        message = child.recv(deadline + request.run_timeout_s * len(wanted))
        phase = message.get("phase")
        timeline.mark(f"reference: {phase} {message.get('baseline') or ''}".rstrip())
        if phase == "want_gpu":
            deadline += _grant_alone(gpu, child, timeline, "reference")
        elif phase == "timing_begin":
            span = _TimedSpan(child)
        elif phase == "timing_end":
            wall, waited = span.end() if span is not None else (None, None)
            deadline += gpu.shared()  # the child waits for this before its next GPU work
            child.signal()
            stats = message["stats"]
            # the loop's own cost per iteration, less what the host's load added meanwhile
            overhead = ((wall - (waited or 0.0) - stats["total_ms"]) / stats["iterations"]) if wall else None
            entry = {"stats": stats, "wall_ms": wall, "descheduled_ms": waited, "overhead_ms_per_iter": overhead}
            path = _task_fact_path(request, hardware, profile, message["baseline"])
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


def _device_string(request: EvalRequest) -> str:
    # The child sees only the GPU it was given, as device 0.
    return "cuda:0" if request.device == "cuda" else "cpu"


# Candidate messages after which the child waits for the parent's go (its GPU work synchronised).
_PAUSE_POINTS = frozenset({"prepared", "imported", "built", "ready", "trial", "timing_end", "timing_outputs",
                           "after"})


def _spawn_candidate(request: EvalRequest, hardware: dict[str, Any], build: BuildContext,
                     limits: dict[str, int]) -> sandbox.Child:
    """Started at the beginning of the evaluation: it imports torch while the compile and the
    reference run, then waits for its setup (no candidate code runs before that)."""
    # torch.compile inside the candidate compiles in its own process: no pool of compile workers that
    # would outlive the warm-up (processes are counted from import to exit)
    env = {**child_env(request, hardware, build, hide_gpu=False), "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    child = sandbox.spawn("candidate", env_extra=env, memory_limit_mb=limits["spawn"],
                          address_space_limit=request.device == "cpu")
    # the watchdog follows the task's own bytes; the address space (CPU) keeps room for torch's own
    # reservations (thread stacks, inductor's compilers), which resident memory never shows
    child.memory_limit_bytes = limits["rss"] << 20
    return child


def _stretch_bounds(request: EvalRequest, reference: dict[str, Any], compile_deferred: bool,
                    floor_s: float) -> dict[str, float]:
    """How long each stretch of the candidate may hold the GPU, by the message that ends it (see
    ``gpuslot.hold_bound``): the judge's inputs, the import (a deferred build too), the models, the
    warm-up call, each trial, the timing's inputs, the timing (its budget besides), the kept
    outputs' copy, the two calls after timing, the end."""
    ref_s = float(reference.get("trial_s") or 0.0)

    bound = partial(hold_bound, floor_s=floor_s)
    rotations = rotations_for(request.device)
    return {"prepared": bound(ref_s, request.trials + rotations + 1),
            "imported": bound(ref_s, extra_s=request.compile_timeout_s if compile_deferred else 0.0),
            "built": bound(ref_s, INIT_CONFIGS), "ready": bound(ref_s), "trial": bound(ref_s),
            "want_gpu": bound(ref_s, rotations),
            "timing_end": bound(ref_s, 2 + rotations + 5, extra_s=request.timing_budget_s),
            "timing_outputs": bound(ref_s, rotations), "after": bound(ref_s, 2),
            "done": bound(ref_s)}


def _warm_candidate(request: EvalRequest, hardware: dict[str, Any], child: sandbox.Child, slot: SlotUse,
                    timeline: Timeline) -> None:
    """The candidate child makes its CUDA context while the compile runs, without the GPU slot: the
    driver does that work on the CPU (a second and more on a busy node, which a waiting timer would
    wait for), and neighbours making and ending contexts moved a timed kernel's median by
    0.989-1.004x on the H200 (bench/context_interference.py). No task or candidate code runs in it yet."""
    child.send({"warm": _device_string(request)})
    try:
        message = child.recv(time.monotonic() + request.run_timeout_s)
    except sandbox.ChildError as exc:
        raise child_failure(exc, child, "starting the candidate process", request.run_timeout_s) from None
    if message.get("phase") != "warm":
        raise PhaseFailure("runtime_error", f"the candidate process answered {message.get('phase')!r} "
                           "to its warm-up", child.log_tail())
    timeline.mark("candidate: warm")


def _candidate(request: EvalRequest, child: sandbox.Child, reference: dict[str, Any],
               rule_set: dict[str, Any], compile_deferred: bool, slot: SlotUse, hardware: dict[str, Any],
               timeline: Timeline, cpu: CpuUse, settings: EvaluatorSettings) -> tuple[judge.Evidence, str]:
    """Run the candidate child and collect its observations in strict protocol order."""
    import torch

    out_bytes = sum(t.numel() * t.element_size() for t in reference["trials"][0]["outputs"]
                    if isinstance(t, torch.Tensor))
    setup = {
        "kernel_source": request.kernel_source,
        "device": _device_string(request),
        "init_inputs": reference["init_inputs"],
        "init_seeds": reference["seeds"]["init"],
        "state_dicts": reference["state_dicts"],
        "trials": [{"config": t["config"]} for t in reference["trials"]],
        "task_source": request.task_source,  # the judge makes the inputs from the seeds, as the reference did
        "profile": reference["profile"],
        "constants": reference["constants"],
        "seeds": {k: reference["seeds"][k] for k in ("trials", "rotations", "after")},
        "timing_budget_s": request.timing_budget_s,
        "max_iters": max_timed_iterations(request.device),
        **timing_options(hardware, settings),
        "threads": threads_for(request),
        "trace_ops": True,
        # strict: one profiler session watches every forward call (child/watch.py)
        "watch": rule_set["dynamic"].get("library_compute", {}).get("enabled", False),
        "allowed_ops": list(rule_set["allowed_ops"]),
        "fingerprint_seed": reference["seeds"]["fingerprint"],
        "keep_rotations": kept_rotations(request.device),
        "poison_bytes": 2 * out_bytes,
    }
    max_bytes = 64 * (out_bytes + (1 << 20)) * (request.trials + rotations_for(request.device) + 4)
    child.mac_key = setup["mac_key"] = secrets.token_bytes(32)
    evidence = judge.Evidence()
    bounds = _stretch_bounds(request, reference, compile_deferred, settings.gpu_hold_floor_s)
    with child, gpu_slot(hardware, slot) as gpu:
        timeline.mark("candidate: slot")
        child.send(setup)
        budget = request.run_timeout_s + (request.compile_timeout_s if compile_deferred else 0.0)
        deadline = time.monotonic() + budget
        expected = (["prepared", "imported", "built", "ready"] + ["trial"] * request.trials
                    + ["want_gpu", "timing_begin", "timing_end", "timing_outputs", "after", "done"])
        received = 0
        span: _TimedSpan | None = None
        # the stretch in progress: the step after which it began, and when it must have ended
        stretch = {"after": "setup", "ends": "prepared", "by": time.monotonic() + bounds["prepared"]}

        def went(after: str) -> None:  # the child has its go: a new stretch begins
            following = expected[received] if received < len(expected) else "done"
            following = "timing_end" if following == "timing_begin" else following
            stretch.update(after=after, ends=following, by=time.monotonic() + bounds.get(following, bounds["done"]))

        try:
            while True:
                try:
                    message = child.recv(min(deadline, stretch["by"]), max_bytes=max_bytes)
                except sandbox.ChildError as exc:
                    if exc.kind != "timeout" or stretch["by"] >= deadline:
                        raise
                    child.kill()  # before the GPU is let go: nothing of it may run beside a timing
                    bound = bounds.get(stretch["ends"], bounds["done"])
                    slot.overrun = {"after": stretch["after"], "ends": stretch["ends"], "bound_s": round(bound, 3),
                                    "alone": stretch["ends"] == "timing_end"}
                    raise PhaseFailure("timeout", f"the candidate held the GPU for more than {bound:.0f} s after "
                                       f"{stretch['after']!r} without reaching its next pause point "
                                       f"({stretch['ends']!r}): killed, and the GPU given to the others",
                                       child.log_tail()) from None
                received += 1
                phase = message.get("phase")
                timeline.mark(f"candidate: {phase}")
                # Processes beside the child: none may be running at any message (the builds of its
                # import and construction are over by then), nor, after the warm-up, in between.
                if not evidence.strays:
                    if child.strays_seen:
                        evidence.strays = [f"the stretch before {phase}", child.strays_seen]
                    elif strays := child.strays():
                        evidence.strays = [phase, strays]
                child.watch_strays = child.watch_strays or phase == "ready"
                if phase == "error":
                    where = message.get("where", "")
                    log = (child.log_tail() + "\n" + str(message.get("error", "")))[-8000:]
                    if message.get("build_error"):
                        raise PhaseFailure("compile_error", "the kernel's extension failed to build", log)
                    error_lines = str(message.get("error", "")).strip().splitlines()
                    summary = error_lines[-1] if error_lines else "unknown error"
                    if "guard.Blocked:" in summary and summary.endswith("in candidate code"):
                        # its own code reached for the judge and was refused (guard.py); a refusal of
                        # library code it called fails the call, never as a violation
                        raise _Forged(make_finding(rule_set, "sandbox_violation", f"during {where}: "
                                                   + summary.split("Blocked:", 1)[1].strip()), log)
                    raise PhaseFailure("runtime_error", f"the candidate raised during {where}: {summary}", log)
                want = expected[received - 1] if received <= len(expected) else None
                if phase != want or message.get("seq") != received:
                    raise _Forged(make_finding(rule_set, "forged_result",
                                               f"message {received} was {phase!r} (seq {message.get('seq')!r}); "
                                               f"the judge sends {want!r} there"), child.log_tail())
                if phase == "ready":
                    evidence.patched.extend(message.get("patched", []))
                elif phase == "trial":
                    if message.get("index") != len(evidence.trials):
                        raise _Forged(make_finding(rule_set, "forged_result", "trial messages out of order"),
                                      child.log_tail())
                    evidence.trials.append(message)
                elif phase == "want_gpu":
                    deadline += _grant_alone(gpu, child, timeline, "candidate")
                    went(phase)
                elif phase == "timing_begin":
                    span = _TimedSpan(child)
                elif phase == "timing_end":
                    if span is not None:
                        evidence.timing_wall_ms, evidence.timing_descheduled_ms = span.end()
                    deadline += gpu.shared()  # the child's next GPU work waits for this (a pause point)
                    evidence.timing = message["stats"]
                elif phase == "timing_outputs":
                    evidence.kept_outputs = message["kept_outputs"]
                elif phase == "after":
                    evidence.after = message["after"]
                    evidence.again = message["again"]
                elif phase == "done":
                    gpu.release("candidate: done")  # its GPU work is over: only its exit is left
                    evidence.patched.extend(message.get("patched", []))
                    evidence.blocked.extend(message.get("blocked", []))
                    evidence.watch = message.get("watch") or {}
                    evidence.objects = message.get("objects") or {}
                    cpu.add("candidate", child.cpu_seconds())
                    break
                if phase in _PAUSE_POINTS:  # the child waits for our go; a waiting timing goes first
                    deadline += gpu.pause_point(f"candidate: {phase}")
                    child.signal()
                    went(phase)
            code = child.proc.wait(timeout=30)
            gpu.release("candidate: exit")  # the process and its CUDA context are gone (if still held)
            extra = child.pending_bytes(wait=0.2)
            if extra:
                raise _Forged(make_finding(rule_set, "forged_result",
                                           f"{extra} unexpected bytes followed the final message"), child.log_tail())
            if code != 0:
                raise PhaseFailure("runtime_error", f"the candidate process exited with code {code} after "
                                   "reporting (an early or abnormal exit is a failure)", child.log_tail())
        except sandbox.ChildError as exc:
            if exc.kind == "protocol":
                raise _Forged(make_finding(rule_set, "forged_result", str(exc)), child.log_tail()) from None
            raise child_failure(exc, child, "running the candidate", budget) from None
        except subprocess.TimeoutExpired:
            raise PhaseFailure("timeout", "the candidate process did not exit after its last report",
                               child.log_tail()) from None
        log = child.log_tail()
    return evidence, log


class _Forged(Exception):
    def __init__(self, finding: Finding | None, log: str):
        super().__init__(finding.message if finding else "forged result")
        self.finding = finding
        self.log = log


def _keep(findings: list[Finding], finding: Finding | None) -> None:
    """Dynamic checks a rule set switches off produce no finding."""
    if finding is not None:
        findings.append(finding)


# ---- the verdict -----------------------------------------------------------------------------
def _judge(request: EvalRequest, rule_set: dict[str, Any], hardware: dict[str, Any],
           reference: dict[str, Any], evidence: judge.Evidence) -> tuple[EvalResult, list[Finding]]:
    thresholds = rule_set["thresholds"]
    findings: list[Finding] = []
    observations = evidence.trials + [evidence.after, evidence.again]
    findings.extend(judge.guard_findings(rule_set, observations))
    findings.extend(judge.watch_findings(rule_set, evidence.watch))
    findings.extend(judge.linkage_findings(rule_set, evidence.objects))
    if evidence.strays:  # counted from import to exit, not only around the trials' calls
        step, pids = evidence.strays
        _keep(findings, make_finding(rule_set, "spawned_threads", f"{len(pids)} process(es) the candidate started "
                                     f"were running beside it at {step!r}"))
    if evidence.patched:
        f = make_finding(rule_set, "patched_measurement", ", ".join(sorted(set(evidence.patched))[:8]))
        _keep(findings, f)

    # correctness: every trial, then the outputs kept during timing and the one after it
    passed, first_failure = 0, ""
    max_abs, max_rel, ref_rel = 0.0, 0.0, 0.0
    lazy = any(k != "tensor" for o in observations for k in o.get("kinds", []))
    for index, (trial, ref) in enumerate(zip(evidence.trials, reference["trials"])):
        cmp = judge.compare_outputs(trial["outputs"], ref["outputs"], ref.get("outputs64"), request.atol, request.rtol)
        max_abs, max_rel = max(max_abs, cmp.max_abs), max(max_rel, cmp.rel_norm)
        ref_rel = max(ref_rel, cmp.ref_rel_norm)
        if cmp.ok:
            passed += 1
        elif not first_failure:
            first_failure = f"trial {index + 1}: {cmp.reason}"
    correct = passed == len(reference["trials"]) and not lazy
    if correct:
        timed_failures = []
        whole = (evidence.timing or {}).get("kept_rotations") or list(range(len(evidence.kept_outputs)))
        for r, kept in zip(whole, evidence.kept_outputs):
            ref = reference["rotations"][r]
            cmp = judge.compare_outputs(kept, ref["outputs"], ref.get("outputs64"), request.atol, request.rtol)
            if not cmp.ok:
                timed_failures.append(f"timing input set {r + 1}: {cmp.reason}")
        cmp = judge.compare_outputs(evidence.after["outputs"], reference["after"]["outputs"],
                                    reference["after"].get("outputs64"), request.atol, request.rtol)
        if not cmp.ok:
            timed_failures.append(f"fresh input after timing: {cmp.reason}")
        if timed_failures:
            f = make_finding(rule_set, "timed_output_mismatch", "; ".join(timed_failures[:3]))
            _keep(findings, f)
        again = judge.compare_outputs(evidence.again["outputs"], evidence.trials[0]["outputs"], None,
                                      float(thresholds["determinism_atol"]), float(thresholds["determinism_rtol"]))
        if not again.ok:
            f = make_finding(rule_set, "nondeterministic", f"trial 1 rerun after timing: {again.reason}")
            _keep(findings, f)
        # precision: error far above the fp32 reference's own error against float64
        ratio_limit = float(thresholds["precision_ratio"]) * ref_rel
        if max_rel > max(ratio_limit, float(thresholds["precision_reject_error"])):
            f = make_finding(rule_set, "precision_downgrade",
                             f"relative error {max_rel:.2e} vs float64, the fp32 reference's is {ref_rel:.2e}")
            _keep(findings, f)
        elif max_rel > max(ratio_limit, float(thresholds["precision_min_error"])):
            findings.append(Finding("precision_downgrade", "review",
                                    f"relative error {max_rel:.2e} vs float64 is high for fp32 (the reference's "
                                    f"own is {ref_rel:.2e})", family=13))

    # degenerate task: near-constant reference output
    import torch

    outs = [t for t in reference["trials"][0]["outputs"] if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if outs and all(float(t.double().std()) <= float(thresholds["degenerate_std"]) * (float(t.double().abs().mean()) + 1e-12)
                    for t in outs if t.numel() > 1):
        f = make_finding(rule_set, "degenerate_task", "the reference output barely varies across inputs")
        _keep(findings, f)

    # timings and speedups
    timing = evidence.timing or {}
    kernel_ms = timing.get("median_ms")
    timings_ms: dict[str, float | None] = {"kernel": kernel_ms}
    speedup: dict[str, float | None] = {}
    baselines = reference.get("baselines", {})
    for name in request.baselines:
        entry = baselines.get(name, {})
        base_ms = entry.get("stats", {}).get("median_ms") if "stats" in entry else None
        timings_ms[name] = base_ms
        speedup[name] = (base_ms / kernel_ms) if (base_ms and kernel_ms) else None
    for name in ("eager", "compile"):
        timings_ms.setdefault(name, None)
        speedup.setdefault(name, None)

    bandwidth, flop_rate = ceilings(hardware)
    floor_ms = max(reference["bytes"] / bandwidth, reference["flops"] / flop_rate) * 1e3
    if correct and kernel_ms is not None:
        if kernel_ms < float(thresholds["floor_factor"]) * floor_ms:
            f = make_finding(rule_set, "impossible_speed",
                             f"{kernel_ms:.4g} ms is below the roofline floor of {floor_ms:.4g} ms "
                             f"({reference['bytes']} bytes, {reference['flops']} FLOPs)")
            _keep(findings, f)
        eager_speedup = speedup.get("eager")
        kept, wanted = len(baselines.get("eager", {}).get("samples_ms") or []), taskfacts.samples()
        line = float(thresholds["extreme_speedup"]) * (1.0 if kept >= wanted else UNSETTLED_LINE)
        if eager_speedup is not None and eager_speedup > line:
            why = ("" if kept >= wanted else
                   f", {UNSETTLED_LINE:g}× the rule's while the eager baseline rests on {kept} of {wanted} timings")
            f = make_finding(rule_set, "extreme_speedup",
                             f"{eager_speedup:.1f}× faster than eager (review threshold {line:g}×{why})")
            _keep(findings, f)
        _keep(findings, judge.repeat_finding(rule_set, timing) or judge.repeat_finding(rule_set, timing, "e2e_"))
        _keep(findings, judge.unseen_work_finding(rule_set, timing))
        _keep(findings, judge.thread_budget_finding(rule_set, timing, threads_for(request)))
        _keep(findings, judge.unjoined_stream_finding(rule_set, timing, evidence.watch))
    if correct:
        _keep(findings, judge.fingerprint_finding(rule_set, timing.get("fingerprints") or [], reference["rotations"]))
        eager = baselines.get("eager", {})
        f = judge.timer_finding(rule_set, wall_ms=evidence.timing_wall_ms, stats=timing,
                                overhead_ms_per_iter=eager.get("overhead_ms_per_iter"),
                                descheduled_ms=evidence.timing_descheduled_ms)
        _keep(findings, f)

    result = EvalResult(
        status="passed" if correct else "incorrect",
        correct=correct,
        timings_ms=timings_ms,
        speedup=speedup,
        message="" if correct else (first_failure or "the output is not a plain tensor"),
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        trials_passed=passed,
        trials=len(reference["trials"]),
        floor_ms=floor_ms,
        timing_stats={"kernel": {k: v for k, v in timing.items() if k != "fingerprints"},
                      "watch": {k: v for k, v in (evidence.watch or {}).items() if k != "own_ops"},
                      **{n: _baseline_stats(baselines.get(n, {})) for n in request.baselines},
                      "speedup_interval": _speedup_intervals(request, timing, baselines),
                      "wall_ms": evidence.timing_wall_ms, "descheduled_ms": evidence.timing_descheduled_ms},
    )
    return result, findings


def _finish(result: EvalResult, findings: list[Finding], request: EvalRequest, rule_set: dict[str, Any],
            reward_cfg: dict[str, Any], started: float, hardware: dict[str, Any] | None,
            settings: EvaluatorSettings) -> EvalResult:
    result.findings = _dedupe(findings)
    if any(f.severity == "reject" for f in result.findings) and result.status in ("passed", "incorrect"):
        rejects = [f for f in result.findings if f.severity == "reject"]
        result.status = "rejected"
        result.message = "; ".join(f"{f.rule}: {f.message}" for f in rejects[:3])
    result.track = request.track
    result.task_hash = request.task_hash
    result.kernel_hash = request.kernel_hash
    result.rule_set = {"name": rule_set.get("name", request.track), "version": rule_set.get("version", "")}
    result.reward_config = {"name": reward_cfg.get("name", ""), "version": reward_cfg.get("version", "")}
    result.hardware = hardware or {}
    result.settings = {"evaluator": settings.to_dict(), "rule_set": rule_set, "reward_config": reward_cfg}
    withheld = set(rule_set.get("withhold_speed", ()))
    result.speed_withheld = sorted({f.rule for f in result.findings if f.rule in withheld})
    result.reward = compute_reward(result, reward_cfg)
    result.duration_s = round(time.monotonic() - started, 3)
    return result


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.rule, f.severity, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def _progress(slot: SlotUse, timeline: Timeline, cpu: CpuUse, budget: dict[str, Any]) -> dict[str, Any]:
    """Where the evaluation's time went, kept with every result that got past the static checks, and
    what it was allowed (its task's sizing, memory limits and GPU admission: tasks/budget.py)."""
    return {"gpu_slot": slot.to_dict(), "timeline": timeline.events, "cpu_s": cpu.to_dict(), **budget}


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
            result.message = (f"infrastructure: a CUDA out-of-memory caused by another process on the GPU, "
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
        return _finish(EvalResult(status=status, message=message, **fields), findings or [], request,
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
    timeline = Timeline(started)
    cpu = CpuUse()
    own_cpu = time.thread_time()
    candidate_child: sandbox.Child | None = None
    budget: dict[str, Any] = {}
    admission = ExitStack()
    try:
        sizing = taskbudget.task_sizing(request, hardware, profile)
        timeline.mark("sizing: kept" if sizing.get("kept") else "sizing: measured")
        # Input sets held at once: the timing's are made one at a time (isolation.JustInTime); only the
        # kept sets' outputs stay whole, the rest are fingerprints.
        rotations = len(kept_rotations(request.device)) + 1
        limits = taskbudget.memory_limits(request, sizing, rotations)
        announced = taskbudget.announced_bytes(request, sizing, rotations)
        budget["sizing"] = {k: sizing[k] for k in ("constants", "bytes", "error") if k in sizing}
        budget["memory"] = {"limits_mb": limits, "announced": announced, "admitted": False}
        budget["memory"].update(admission.enter_context(taskbudget.admitted(request, hardware, announced["total"])))
        timeline.mark("gpu memory: admitted" if budget["memory"]["admitted"] else "gpu memory: not counted")
        build = build_context(request, hardware)
        candidate_child = _spawn_candidate(request, hardware, build, limits)
        # Compiling (CPU work), the reference (trusted, device work) and the candidate child's CUDA
        # context overlap.
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="ka-phase") as phases:
            reference_job = phases.submit(_reference, request, hardware, profile, sizing, limits, slot, timeline,
                                          cpu, settings)
            warm_job = (phases.submit(_warm_candidate, request, hardware, candidate_child, slot, timeline)
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
        evidence, run_log = _candidate(request, candidate_child, reference, rule_set, outcome.deferred, slot,
                                       hardware, timeline, cpu, settings)
    except PhaseFailure as failure:
        cpu.add("parent", time.thread_time() - own_cpu)
        logs = ({"compile_log": failure.log} if failure.status == "compile_error"
                else {"run_log": failure.log, "compile_log": compile_log})
        return stop(failure.status, failure.message, static, timing_stats=_progress(slot, timeline, cpu, budget),
                    **logs)
    except _Forged as forged:
        cpu.add("parent", time.thread_time() - own_cpu)
        findings = static + ([forged.finding] if forged.finding else [])
        return stop("rejected", forged.finding.message if forged.finding else "forged result", findings,
                    run_log=forged.log, compile_log=compile_log, timing_stats=_progress(slot, timeline, cpu, budget))
    finally:
        if candidate_child is not None:
            candidate_child.close(wait_s=0)  # unused when an earlier phase ended the evaluation
        admission.close()  # the GPU memory it announced is free for the next evaluation
    judged_from = time.thread_time()
    cpu.add("parent", judged_from - own_cpu)
    result, dynamic = _judge(request, rule_set, hardware, reference, evidence)
    timeline.mark("judge: done")
    cpu.add("judge", time.thread_time() - judged_from)
    result.timing_stats.update(_progress(slot, timeline, cpu, budget))
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
    return _finish(result, static + dynamic, request, rule_set, reward_cfg, started, hardware, settings)

