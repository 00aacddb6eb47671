"""The reference phase: the trusted reference child (``child/reference.py``) makes the inputs from
secret seeds, runs the task's ``Model`` for the reference outputs and times each baseline that is not
kept yet; the parent reads its messages in order, steps aside for waiting timers at its pause points,
and keeps what it measured (``tasks/facts.py``)."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from .. import judge
from ..build.compile import PhaseFailure, child_env, child_failure, threads_for
from ..sandbox import gpuactivity, refpool
from ..sandbox import process as sandbox
from ..sandbox.gpuslot import GpuSlot, SlotUse, gpu_slot
from ..schema import EvalRequest
from ..settings import EvaluatorSettings
from ..tasks import facts as taskfacts
from . import plan
from .accounting import CpuUse, TimedSpan, Timeline
from .plan import (
    INIT_CONFIGS,
    compares_on_device,
    device_string,
    fingerprinted_later,
    max_timed_iterations,
    rotations_for,
    timing_options,
)


def task_fact_path(request: EvalRequest, hardware: dict[str, Any], profile: str | None, name: str) -> Path:
    """Where a per-task fact measured by the trusted reference is kept: a baseline's timing, or the
    task's FLOP count (counting imports torch._dynamo, over two seconds of CPU per evaluation)."""
    return taskfacts.fact_path([request.task_hash, profile or "", hardware["key"], str(threads_for(request)),
                                str(request.timing_budget_s)], name)


def spread_path(request: EvalRequest, hardware: dict[str, Any]) -> Path:
    """Where this hardware's run-to-run spread is noted (``taskfacts.load_run_to_run``): per hardware
    key and thread count, across its tasks."""
    return taskfacts.fact_path([hardware["key"], str(threads_for(request))], "run_to_run")


def grant_alone(gpu: GpuSlot, child: sandbox.Child, timeline: Timeline, role: str) -> float:
    """A child asked for the GPU to itself (a timing): take it exclusive, then say go. Returns the
    seconds waited, which the caller adds to the child's deadline (waiting is not the child's time)."""
    waited = gpu.exclusive()
    timeline.mark(f"{role}: gpu alone")
    child.signal()
    return waited


def let_busy_go(gpu: GpuSlot, child: sandbox.Child, hardware: dict[str, Any], timeline: Timeline, role: str,
                trusted: bool, since: float) -> float:
    """The child had the GPU alone since ``since`` (the monotonic time of its go) but its timing
    found it still running other processes' work, queued before they were stopped
    (``timing.await_idle``): note whose work it is (``gpuactivity.busy_pids``, this child's own left
    out), so their parents count that stop as their children's own time and their bounds can end
    them; let the GPU go, queue again as a timer and say go. A candidate's word that the GPU was busy
    is only taken with the work named: where NVML cannot name it, only the trusted reference's timing
    charges the stopped children. Returns the seconds to add to the child's bounds: the wait for the
    GPU again, and where the work was named (or the child is trusted), the time its timing spent
    waiting for the GPU to drain, which was the neighbour's doing; an unnamed claim's drain stays the
    candidate's own time."""
    pids = gpuactivity.busy_pids(hardware)
    if pids is not None:
        pids -= child.tree()
    elif not trusted:
        pids = set()
    gpu.note_busy(pids)
    timeline.mark(f"{role}: gpu busy")
    drained = max(time.monotonic() - since, 0.0) if (trusted or pids) else 0.0
    waited = gpu.shared() + gpu.exclusive()
    child.signal()
    return drained + waited


def run_reference(request: EvalRequest, hardware: dict[str, Any], profile: str | None, sizing: dict[str, Any],
                  limits: dict[str, int], slot: SlotUse, timeline: Timeline, cpu: CpuUse,
                  settings: EvaluatorSettings, fp64: bool = True) -> dict[str, Any]:
    """Inputs, reference outputs and baseline timings from the trusted reference child (its outputs
    in float64 too, unless ``fp64`` is off: a task too large for that beside its candidate)."""
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
    if flops_cached is None and (sizing.get("bytes") or {}).get("flops") is not None:
        flops_cached = int(sizing["bytes"]["flops"])  # counted on the meta device while sizing the task
    setup = {"task_source": request.task_source, "profile": profile, "constants": sizing["constants"],
             "device": device_string(request),
             "seeds": seeds, "baselines": wanted, "count_flops": flops_cached is None,
             "timing_budget_s": request.timing_budget_s, "max_iters": max_timed_iterations(request.device),
             **timing_options(hardware, settings), "threads": threads_for(request),
             "fingerprint_seed": seeds["fingerprint"], "atol": request.atol, "rtol": request.rtol}
    on_device = compares_on_device(request, sizing, settings)
    setup["compare_on_device"] = on_device
    setup["fp64"] = fp64
    setup["keep_rotations"] = plan.kept_rotations(request.device, on_device)
    setup["fingerprint_later"] = fingerprinted_later(request.device, on_device)
    setup["pair"] = pairing_stays = plan.pairs(request.device, settings.pair_host_timed)  # it stays to time a pair
    env = child_env(request, hardware, None, hide_gpu=False)
    child, reused = refpool.borrow(env, limits["spawn"])
    child.memory_limit_bytes = limits["rss"] << 20  # this evaluation's own bound (the watchdog's)
    child_cpu = (child.cpu_seconds() or 0.0) if reused else 0.0
    setup["serve"] = settings.reference_reuse  # after its done, the child waits for the next evaluation's setup
    timeline.mark("reference: reused" if reused else "reference: started")
    clean, checker = False, None
    try:
        # On CUDA the GPU is taken once the child has built its models on the CPU (its first pause
        # point); on the CPU that work is the host's, which the slot keeps apart from timings.
        with gpu_slot(hardware, slot, mode="later" if device_string(request).startswith("cuda") else "shared") as gpu:
            timeline.mark("reference: slot")
            child.send(setup)
            child.gpu_slot = gpu  # stopped mid-stretch whenever a timer waits
            try:
                reference, baselines = _messages(request, hardware, profile, child, gpu, timeline,
                                                 wanted, cached, flops_cached, flops_path,
                                                 serves=on_device or setup["fingerprint_later"] or pairing_stays)
            except sandbox.ChildError as exc:
                raise child_failure(exc, child, "running the reference", request.run_timeout_s) from None
            finally:
                child.gpu_slot = None
        clean = True
        if reference.get("checking"):
            checker = Checker(child, env, limits["spawn"], request.run_timeout_s, timeline,
                              on_device=on_device, rotations=len(seeds["rotations"]))
    finally:
        after = child.cpu_seconds()
        cpu.add("reference", after - child_cpu if after is not None else None)
        if checker is None:
            refpool.give_back(child, env, limits["spawn"], clean)
        cpu.add("parent", time.thread_time() - own_cpu)
    reference["checker"] = checker
    reference["baselines"] = baselines
    reference["run_to_run"] = taskfacts.load_run_to_run(spread_path(request, hardware))
    reference["seeds"] = seeds
    reference["profile"] = profile
    reference["constants"] = sizing["constants"]
    return reference


def _messages(request: EvalRequest, hardware: dict[str, Any], profile: str | None, child: sandbox.Child,
              gpu: GpuSlot, timeline: Timeline, wanted: list[str], cached: dict[str, dict[str, Any]],
              flops_cached: int | None, flops_path: Path, serves: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The reference child's messages, in order: pause points, its outputs, then each baseline's
    timing; ``serves``: it was asked to stay for the candidate phase (``Checker``)."""
    deadline = time.monotonic() + request.run_timeout_s
    went, stopped = time.monotonic(), child.stopped_s
    message = child.recv(deadline)
    trial_s = 0.0  # the reference's slowest trial: what bounds the candidate's stretches
    while message.get("phase") == "checkpoint":  # a pause point: a waiting timing goes first
        step = f"reference: {message.get('step')}"
        timeline.mark(step)
        deadline += child.stopped_s - stopped  # kept stopped for other timings: not the child's time
        if message.get("step") == "trial":
            trial_s = max(trial_s, time.monotonic() - went - (child.stopped_s - stopped))
        if message.get("step") == "outputs":  # the large message that follows is CPU work alone
            gpu.release(step)
        elif not gpu.holding:  # before the child's first GPU work (its models are built)
            deadline += gpu.shared()
        else:
            deadline += gpu.pause_point(step)
        child.signal()
        went, stopped = time.monotonic(), child.stopped_s
        message = child.recv(deadline)
    deadline += child.stopped_s - stopped
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
    went_alone = time.monotonic()  # when the child last had its go to time alone
    while True:
        stopped = child.stopped_s
        message = child.recv(deadline + request.run_timeout_s * len(wanted))
        deadline += child.stopped_s - stopped
        phase = message.get("phase")
        timeline.mark(f"reference: {phase} {message.get('baseline') or ''}".rstrip())
        if phase == "want_gpu":
            deadline += grant_alone(gpu, child, timeline, "reference")
            went_alone = time.monotonic()
        elif phase == "gpu_busy":
            deadline += let_busy_go(gpu, child, hardware, timeline, "reference", trusted=True, since=went_alone)
            went_alone = time.monotonic()
        elif phase == "compiling":  # a baseline's compile: CPU work alone, until "compiled"
            gpu.release("reference: compiling")
            child.signal()
        elif phase == "compiled":
            deadline += gpu.shared()  # before the compiled code first runs
            child.signal()
        elif phase == "timing_begin":
            span = TimedSpan(child)  # while the child waits for this go
            child.signal()
        elif phase == "timing_end":
            wall, waited = span.end() if span is not None else (None, None)
            deadline += gpu.shared()  # the child waits for this before its next GPU work
            child.signal()
            stats = message["stats"]
            overhead = judge.loop_cost_ms(wall, waited, stats)
            entry = {"stats": stats, "wall_ms": wall, "descheduled_ms": waited, "overhead_ms_per_iter": overhead,
                     "span": span.detail if span is not None else None}
            path = task_fact_path(request, hardware, profile, message["baseline"])
            baselines[message["baseline"]] = taskfacts.keep_baseline(path, entry, spread_path(request, hardware))
        elif phase == "baseline_failed":
            gpu.shared()  # it may have failed while timing
            if message["baseline"] not in cached:  # a kept timing stands
                baselines[message["baseline"]] = {"error": message.get("error", "")}
        elif phase == "done":
            gpu.release("reference: done")
            reference["gpu_peak"] = message.get("gpu_peak")
            return reference, baselines
        elif phase == "checking" and serves:  # it stays, to compare or fingerprint for the candidate phase
            gpu.release("reference: checking")
            reference["checking"] = True
            return reference, baselines
        elif phase == "error":
            raise PhaseFailure("runtime_error", "the reference failed: " + str(message.get("error"))[-3000:],
                               child.log_tail())


class Checker:
    """The reference child kept through the candidate phase, asked by the parent for what only the
    trusted reference can answer there: the fingerprints of the timing input sets the candidate's
    timing reached (``plan.fingerprinted_later``), and, where outputs are compared on the device
    (``on_device``: ``plan.compares_on_device``), the comparison of what the candidate's judge handed
    over (``child/handover.py``). The candidate's process is paused at its pause point meanwhile, and
    the GPU slot is the candidate phase's (held shared; the child is stopped for timers with the
    candidate's, ``stopped_for_timers``)."""

    def __init__(self, child: sandbox.Child, env: dict[str, str], spawn_mb: int, timeout_s: float,
                 timeline: Timeline, on_device: bool, rotations: int):
        self.child, self._env, self._spawn_mb = child, env, spawn_mb
        self._timeout_s = timeout_s
        self._timeline = timeline
        self.on_device = on_device
        self._rotations = rotations
        self._broken = False

    def broke(self) -> None:
        """It left the protocol (a failed or garbled answer): closed at the end, never lent again."""
        self._broken = True

    def _ask(self, request: dict[str, Any], expected: str, what: str) -> dict[str, Any]:
        """Send one request and read its answer (``recv`` does not count the time the child is kept
        stopped for other evaluations' timers)."""
        self.child.send(request)
        try:
            answer = self.child.recv(time.monotonic() + self._timeout_s)
        except sandbox.ChildError as exc:
            self._broken = True
            # what it was asked about came from the candidate: the failure is the evaluation's
            raise PhaseFailure("runtime_error", f"the reference child failed {what} ({exc.kind})",
                               self.child.log_tail()) from None
        if answer.get("phase") != expected:
            self._broken = True
            said = f": {str(answer.get('error'))[-3000:]}" if answer.get("phase") == "error" else ""
            raise PhaseFailure("runtime_error", f"the reference child answered {answer.get('phase')!r} "
                               f"{what}{said}", self.child.log_tail())
        return answer

    def fingerprints(self, indices: Any) -> dict[int, dict[str, Any]]:
        """``{r: {"fingerprint", "bounds"}}``: the reference's for each timing input set the candidate's
        timing says it fingerprinted, made now from the sets' seeds. The indices come from the
        candidate's process: only whole numbers of this evaluation's sets are asked for (any other is
        left out, and ``judge.fingerprint_finding`` finds no reference for it)."""
        wanted = sorted({r for r in indices if type(r) is int and 0 <= r < self._rotations})
        if not wanted:
            return {}
        answer = self._ask({"fingerprints": wanted}, "fingerprinted",
                           f"fingerprinting {len(wanted)} timing input sets")
        self._timeline.mark("reference: fingerprinted")
        made = {int(r): {"fingerprint": fingerprint, "bounds": bounds}
                for r, fingerprint, bounds in answer.get("rotations") or []}
        if sorted(made) != wanted:
            self._broken = True
            raise PhaseFailure("runtime_error", f"the reference child fingerprinted {len(made)} of the "
                               f"{len(wanted)} timing input sets asked for", self.child.log_tail())
        return made

    def compare(self, kind: str, index: int, outputs: Any, against: Any = None,
                tolerances: tuple[float, float] | None = None) -> dict[str, Any]:
        """``{"ok", "reason", "max_abs", "rel_norm", "ref_rel_norm"}`` of the candidate's outputs
        (descriptors as its judge sent them) against the reference's for that input set."""
        request: dict[str, Any] = {"compare": kind, "index": index, "outputs": outputs}
        if kind == "again":
            request.update(against=against, atol=tolerances[0], rtol=tolerances[1])
        answer = self._ask(request, "compared", f"comparing the candidate's {kind} outputs on the device")
        self._timeline.mark(f"reference: compared {kind} {index}")
        if answer.get("kind") != kind or answer.get("index") != index:
            self._broken = True
            raise PhaseFailure("runtime_error", f"the reference child answered the {kind} {index} comparison "
                               f"for {answer.get('kind')!r} {answer.get('index')!r}", self.child.log_tail())
        return {"ok": bool(answer["ok"]), "reason": str(answer.get("reason", "")),
                "max_abs": float(answer.get("max_abs", 0.0)), "rel_norm": float(answer.get("rel_norm", 0.0)),
                "ref_rel_norm": float(answer.get("ref_rel_norm", 0.0))}

    def close(self) -> dict[str, int] | None:
        """The end of the evaluation: a child that answered every request finishes (its cached GPU
        memory freed) and is kept for the next evaluation; any other is closed. Returns the GPU
        memory the child's allocator held at most over the evaluation, where its done said."""
        clean, peak = False, None
        if not self._broken and self.child.alive():
            self.child.send({"finish": True})
            try:
                done = self.child.recv(time.monotonic() + 60.0)
                clean, peak = done.get("phase") == "done", done.get("gpu_peak")
            except sandbox.ChildError:
                clean = False
        refpool.give_back(self.child, self._env, self._spawn_mb, clean)
        return peak
