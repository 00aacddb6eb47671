"""The candidate phase: the candidate child (``child/candidate.py``) is started at the beginning of
the evaluation, makes its CUDA context while the compile runs, and once the reference is done gets
its setup; the parent reads its messages in strict protocol order into the evidence the verdict
judges, bounds each stretch it holds the GPU between pause points, and ends it past a bound."""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

from .. import judge
from ..build.compile import BuildContext, PhaseFailure, child_env, child_failure, threads_for
from ..hardware import timing_cpu
from ..rules import make_finding
from ..sandbox import process as sandbox
from ..sandbox.gpumemory import HOLD_BYTES
from ..sandbox.gpuslot import GpuSlot, SlotUse, gpu_slot, hold_bound
from ..schema import EvalRequest, Finding
from ..settings import EvaluatorSettings
from ..tasks import facts as taskfacts
from . import pairing, plan
from .accounting import CpuUse, TimedSpan, Timeline
from .plan import (
    INIT_CONFIGS,
    device_string,
    max_timed_iterations,
    rotations_for,
    timing_options,
)
from .reference import Checker, grant_alone, let_busy_go, spread_path, task_fact_path


class Forged(Exception):
    """The candidate's messages broke the protocol or its own code reached for the judge: the
    evaluation ends ``rejected`` with this finding."""

    def __init__(self, finding: Finding | None, log: str):
        super().__init__(finding.message if finding else "forged result")
        self.finding = finding
        self.log = log


# Candidate messages after which the child waits for the parent's go (its GPU work synchronised).
_PAUSE_POINTS = frozenset({"prepared", "imported", "built", "ready", "trial", "timing_end", "timing_read",
                           "timing_outputs", "after"})


@contextmanager
def stopped_for_timers(gpu: GpuSlot, *children: sandbox.Child | Checker | None) -> Iterator[None]:
    """While the candidate phase holds its GPU slot, its child and the reference child comparing on
    the device for it are stopped mid-stretch whenever a timer waits (``Child.yield_to_timers``)."""
    held = [c.child if isinstance(c, Checker) else c for c in children if c is not None]
    for child in held:
        child.gpu_slot = gpu
    try:
        yield
    finally:
        for child in held:
            child.gpu_slot = None


def spawn_candidate(request: EvalRequest, hardware: dict[str, Any], build: BuildContext,
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
                    floor_s: float, host_warm_s: float = 0.0) -> dict[str, float]:
    """How long each stretch of the candidate may hold the GPU, by the message that ends it (see
    ``gpuslot.hold_bound``): the judge's inputs, the import (a deferred build too), the models, the
    warm-up call, each trial, the timing's inputs, the timing (its budget and host warm-up besides), the kept
    outputs' copy and their message, the two calls after timing, the end."""
    ref_s = float(reference.get("trial_s") or 0.0)

    bound = partial(hold_bound, floor_s=floor_s)
    rotations = rotations_for(request.device)
    return {"prepared": bound(ref_s, request.trials + rotations + 1),
            "imported": bound(ref_s, extra_s=request.compile_timeout_s if compile_deferred else 0.0),
            "built": bound(ref_s, INIT_CONFIGS), "ready": bound(ref_s), "trial": bound(ref_s),
            "want_gpu": bound(ref_s, rotations),
            "timing_end": bound(ref_s, 2 + rotations + 5, extra_s=request.timing_budget_s + host_warm_s),
            "timing_read": bound(ref_s, rotations), "timing_outputs": bound(ref_s, rotations),
            "after": bound(ref_s, 2),
            "done": bound(ref_s)}


def warm_candidate(request: EvalRequest, hardware: dict[str, Any], child: sandbox.Child, slot: SlotUse,
                   timeline: Timeline) -> None:
    """The candidate child makes its CUDA context while the compile runs, without the GPU slot: the
    driver does that work on the CPU (a second and more on a busy node, which a waiting timer would
    wait for), and neighbours making and ending contexts moved a timed kernel's median by
    0.989-1.004x on the H200 (bench/context_interference.py). No task or candidate code runs in it yet."""
    child.send({"warm": device_string(request)})
    try:
        message = child.recv(time.monotonic() + request.run_timeout_s)
    except sandbox.ChildError as exc:
        raise child_failure(exc, child, "starting the candidate process", request.run_timeout_s) from None
    if message.get("phase") != "warm":
        raise PhaseFailure("runtime_error", f"the candidate process answered {message.get('phase')!r} "
                           "to its warm-up", child.log_tail())
    timeline.mark("candidate: warm")


def run_candidate(request: EvalRequest, child: sandbox.Child, reference: dict[str, Any],
                  rule_set: dict[str, Any], compile_deferred: bool, slot: SlotUse, hardware: dict[str, Any],
                  timeline: Timeline, cpu: CpuUse, settings: EvaluatorSettings) -> tuple[judge.Evidence, str]:
    """Run the candidate child and collect its observations in strict protocol order."""
    out_bytes = int(reference.get("output_bytes") or 0)
    checker = reference.get("checker")  # the reference child kept for this phase (pipeline/reference.Checker)
    on_device = checker is not None and checker.on_device  # outputs compared on the device by it
    determinism = (float(rule_set["thresholds"]["determinism_atol"]), float(rule_set["thresholds"]["determinism_rtol"]))
    setup = {
        "kernel_source": request.kernel_source,
        "device": device_string(request),
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
        "keep_rotations": plan.kept_rotations(request.device, on_device),
        "compare_on_device": on_device,
        "poison_bytes": 2 * out_bytes,
        "hold_bytes": HOLD_BYTES,  # what the GPU announcement counts for it (sandbox/gpumemory.py)
        # host-bound: timed in alternation with its eager baseline, a round of this many iterations each
        "pair_every": plan.pair_every(request.device, checker is not None, reference.get("baselines") or {},
                                      settings.pair_host_timed),
    }
    max_bytes = 64 * (out_bytes + (1 << 20)) * (request.trials + rotations_for(request.device) + 4)
    child.mac_key = setup["mac_key"] = secrets.token_bytes(32)
    evidence = judge.Evidence()
    bounds = _stretch_bounds(request, reference, compile_deferred, settings.gpu_hold_floor_s, settings.host_warm_s)
    with child, gpu_slot(hardware, slot) as gpu, stopped_for_timers(gpu, child, checker):
        timeline.mark("candidate: slot")
        child.send(setup)
        budget = request.run_timeout_s + (request.compile_timeout_s if compile_deferred else 0.0)
        deadline = time.monotonic() + budget
        expected = (["prepared", "imported", "built", "ready"] + ["trial"] * request.trials
                    + ["want_gpu", "timing_begin", "timing_end", "timing_read", "timing_outputs", "after", "done"])
        received = 0
        busy = 0  # "gpu_busy" and "round" messages: outside the protocol's order, inside the timing
        rounds = 0  # the timing's rounds in alternation with its baseline
        held_s = 0.0  # how long the parent held its word back after them (the reference's rounds)
        pair: pairing.Pairing | None = None
        span: TimedSpan | None = None
        # the stretch in progress: the step after which it began, and when it must have ended
        stretch = {"after": "setup", "ends": "prepared", "by": time.monotonic() + bounds["prepared"],
                   "went": time.monotonic()}

        def went(after: str) -> None:  # the child has its go: a new stretch begins
            at = received - busy
            following = expected[at] if at < len(expected) else "done"
            following = "timing_end" if following == "timing_begin" else following
            stretch.update(after=after, ends=following, by=time.monotonic() + bounds.get(following, bounds["done"]),
                           went=time.monotonic())

        try:
            while True:
                stopped = child.stopped_s
                try:
                    message = child.recv(min(deadline, stretch["by"]), max_bytes=max_bytes)
                except sandbox.ChildError as exc:
                    stretch["by"] += child.stopped_s - stopped
                    deadline += child.stopped_s - stopped
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
                # kept stopped for other evaluations' timings: not the candidate's time
                stretch["by"] += child.stopped_s - stopped
                deadline += child.stopped_s - stopped
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
                        raise Forged(make_finding(rule_set, "sandbox_violation", f"during {where}: "
                                                   + summary.split("Blocked:", 1)[1].strip()), log)
                    raise PhaseFailure("runtime_error", f"the candidate raised during {where}: {summary}", log)
                at = received - busy
                want = expected[at - 1] if at <= len(expected) else None
                if phase == "round" and want == "timing_end" and setup["pair_every"]:  # a paired timing's round
                    busy += 1
                    rounds += 1
                    # a round ends before the iteration cap, never at it (timing.time_callable)
                    if message.get("seq") != received or rounds * setup["pair_every"] >= setup["max_iters"]:
                        raise Forged(make_finding(rule_set, "forged_result",
                                                   f"message {received} was round {rounds} (seq {message.get('seq')!r})"),
                                     child.log_tail())
                    paused = time.monotonic()
                    word = pair.turn() if pair is not None else b"g"
                    held = time.monotonic() - paused  # the reference's round, not the candidate's time
                    deadline += held
                    stretch["by"] += held
                    held_s += held
                    child.signal(word)
                    continue
                if phase == "gpu_busy" and want == "timing_begin":  # between its go and its timing
                    busy += 1
                    if message.get("seq") != received:
                        raise Forged(make_finding(rule_set, "forged_result",
                                                   f"message {received} had seq {message.get('seq')!r}"),
                                     child.log_tail())
                    # waiting for the GPU again is not its time, nor the drain a neighbour's work caused;
                    # the stretch to its timing's end goes on
                    waited = let_busy_go(gpu, child, hardware, timeline, "candidate", trusted=False,
                                         since=stretch["went"])
                    stretch["went"] = time.monotonic()
                    deadline += waited
                    stretch["by"] += waited
                    continue
                if phase != want or message.get("seq") != received:
                    raise Forged(make_finding(rule_set, "forged_result",
                                               f"message {received} was {phase!r} (seq {message.get('seq')!r}); "
                                               f"the judge sends {want!r} there"), child.log_tail())
                if phase == "ready":
                    evidence.patched.extend(message.get("patched", []))
                elif phase == "trial":
                    if message.get("index") != len(evidence.trials):
                        raise Forged(make_finding(rule_set, "forged_result", "trial messages out of order"),
                                      child.log_tail())
                    # only the parent says what was checked on the device (whatever the child wrote there)
                    message["checked"] = (checker.compare("trial", len(evidence.trials), message.pop("outputs", None))
                                          if on_device else None)
                    evidence.trials.append(message)
                elif phase == "want_gpu":
                    deadline += grant_alone(gpu, child, timeline, "candidate")
                    went(phase)
                elif phase == "timing_begin":
                    if setup["pair_every"]:  # the reference times its first round while the candidate waits
                        paused = time.monotonic()
                        pair = pairing.Pairing(checker, child, gpu, hardware, timeline, setup["pair_every"],
                                               request.run_timeout_s, timing_cpu(hardware))
                        pair.begin()
                        held = time.monotonic() - paused
                        deadline += held
                        stretch["by"] += held
                    span = TimedSpan(child)  # while the child waits for this go
                    child.signal()
                elif phase == "timing_end":
                    if span is not None:
                        evidence.timing_wall_ms, evidence.timing_descheduled_ms = span.end(
                            extra_blocks=rounds * pairing.BLOCKS_PER_ROUND, paused_ms=held_s * 1e3)
                        evidence.timing_span = span.detail
                    if pair is not None:
                        paused = time.monotonic()
                        entry = pair.end()
                        if entry is not None:  # a trusted timing of the baseline like any other: kept beside the others
                            taskfacts.keep_baseline(task_fact_path(request, hardware, reference["profile"], "eager"),
                                                    dict(entry), spread_path(request, hardware))
                        reference["paired"] = {"entry": entry, "error": pair.error, "rounds": rounds}
                        deadline += time.monotonic() - paused
                    deadline += gpu.shared()  # the child's next GPU work waits for this (a pause point)
                    evidence.timing = message["stats"]
                elif phase == "timing_read":  # the kept outputs are on the child's host: CPU work alone
                    gpu.release("candidate: timing_read")  # until the large message below has come
                elif phase == "timing_outputs":
                    evidence.kept_outputs = message["kept_outputs"]
                    deadline += gpu.shared()  # before the child's next GPU work (it waits for the go)
                elif phase == "after":
                    evidence.after = message["after"]
                    evidence.again = message["again"]
                    if type(evidence.after) is not dict or type(evidence.again) is not dict:
                        raise Forged(make_finding(rule_set, "forged_result", "malformed after-timing message"),
                                     child.log_tail())
                    evidence.after["checked"] = evidence.again["checked"] = None
                    asked = time.monotonic()
                    if on_device:
                        evidence.after["checked"] = checker.compare("after", 0, evidence.after.pop("outputs", None))
                        evidence.again["checked"] = checker.compare("again", 0, evidence.again.pop("outputs", None),
                                                                    evidence.again.pop("against", None), determinism)
                    if checker is not None:  # the timed sets' answers, for the ones its timing reached
                        reached = judge.unanswered_sets(evidence.timing, reference["rotations"])
                        for r, answer in checker.fingerprints(reached).items():
                            reference["rotations"][r] = answer
                    deadline += time.monotonic() - asked  # the reference's work, not the candidate's
                elif phase == "done":
                    gpu.release("candidate: done")  # its GPU work is over: only its exit is left
                    evidence.patched.extend(message.get("patched", []))
                    evidence.blocked.extend(message.get("blocked", []))
                    evidence.watch = message.get("watch") or {}
                    evidence.objects = message.get("objects") or {}
                    peak = message.get("gpu_peak")
                    evidence.gpu_peak = ({k: peak[k] for k in ("reserved", "allocated") if type(peak.get(k)) is int}
                                         if type(peak) is dict else None)
                    cpu.add("candidate", child.cpu_seconds())
                    break
                if phase in _PAUSE_POINTS:  # the child waits for our go; a waiting timing goes first
                    deadline += gpu.pause_point(f"candidate: {phase}")
                    child.signal()
                    went(phase)
            code = child.proc.wait(timeout=30)
            timeline.mark("candidate: exited")  # its CUDA context's teardown is part of its time
            gpu.release("candidate: exit")  # the process and its CUDA context are gone (if still held)
            extra = child.pending_bytes(wait=0.2)
            if extra:
                raise Forged(make_finding(rule_set, "forged_result",
                                           f"{extra} unexpected bytes followed the final message"), child.log_tail())
            if code != 0:
                raise PhaseFailure("runtime_error", f"the candidate process exited with code {code} after "
                                   "reporting (an early or abnormal exit is a failure)", child.log_tail())
        except sandbox.ChildError as exc:
            if exc.kind == "protocol":
                raise Forged(make_finding(rule_set, "forged_result", str(exc)), child.log_tail()) from None
            raise child_failure(exc, child, "running the candidate", budget) from None
        except subprocess.TimeoutExpired:
            raise PhaseFailure("timeout", "the candidate process did not exit after its last report",
                               child.log_tail()) from None
        finally:
            if pair is not None:
                pair.unpin()
        log = child.log_tail()
    return evidence, log
