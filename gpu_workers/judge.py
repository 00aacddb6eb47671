"""The verdict, computed in the parent from raw observations the children sent.

Nothing here runs candidate code: it compares tensors against the trusted reference and turns the
candidate child's observations (op traces, thread counts, timings) into findings.
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from typing import Any

import torch

from .child.compare import Comparison, compare_outputs  # noqa: F401 - the verdict's, re-exported
from .rules import make_finding
from .schema import Finding
from .settings import current


def limit_threads() -> int:
    """Cap this process's torch intra-op threads for the judge's comparisons at
    ``KERNELCOURT_JUDGE_THREADS`` (default 1; never raised) and return the cap. Called where a
    worker starts (the local pool, a Ray evaluator actor, a Celery evaluation process), not by a
    lone ``evaluate``: a worker runs many evaluations at once, each judging in its own thread; with
    torch's default (a thread per core) every one of them would start a team of that many threads
    per operation, and their waits cost more CPU than the comparisons themselves. Parallelism comes
    from the concurrent evaluations. Process-wide: torch has no per-call setting, and a thread takes
    the cap when it first runs an op."""
    cap = current().judge_threads
    if torch.get_num_threads() > cap:
        torch.set_num_threads(cap)
    return cap


@dataclass
class Evidence:
    """Everything the candidate child reported, in protocol order."""

    trials: list[dict[str, Any]] = field(default_factory=list)
    timing: dict[str, Any] | None = None
    kept_outputs: list[list[Any]] = field(default_factory=list)
    after: dict[str, Any] | None = None
    again: dict[str, Any] | None = None
    patched: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    timing_wall_ms: float | None = None
    timing_descheduled_ms: float | None = None  # of that wall time, the timing thread waiting for a CPU
    timing_span: dict[str, Any] = field(default_factory=dict)  # how the parent read it (accounting.TimedSpan)
    watch: dict[str, Any] = field(default_factory=dict)  # child/watch.py's report (strict track)
    objects: dict[str, Any] = field(default_factory=dict)  # executable mappings before/after, writable roots
    # Processes of the candidate's tree (besides the child) found running at a message: (step, pids),
    # the first such step only; counted by the parent at every message, from import to exit.
    strays: list[Any] = field(default_factory=list)
    gpu_peak: dict[str, int] | None = None  # its allocator's peaks, by its own word (informational)


def fingerprint_mismatch(got: list[list[float] | None], want: list[list[float] | None],
                         bounds: list[list[float] | None]) -> str | None:
    """Why a timed call's fingerprint (child.isolation.Fingerprint) cannot come from an output within
    the tolerance of the reference's for the same inputs (None: it can)."""
    if not isinstance(got, list | tuple):
        return "no fingerprint"
    if len(got) != len(want):
        return f"{len(got)} outputs, the reference has {len(want)}"
    for k, (g, w, b) in enumerate(zip(got, want, bounds)):
        if w is None or b is None:
            continue
        if not all(math.isfinite(v) for v in (*w, *b)):
            continue  # a non-finite reference is the full comparison's to judge
        if g is None:
            return f"output {k} is missing"
        for gi, wi, bi in zip(g, w, b):
            if not math.isfinite(gi) or abs(gi - wi) > bi:
                return f"output {k}'s projection is {gi:.6g}, the reference's {wi:.6g} (bound ±{bi:.3g})"
    return None


def library_ops(ops: dict[str, int], allowed: list[str]) -> dict[str, int]:
    allowed_set = set(allowed)
    found = {}
    for name, count in ops.items():
        namespace, _, op = name.partition("::")
        if namespace not in ("aten", "prims"):
            continue  # the candidate's own registered ops are custom kernels
        if op in allowed_set:
            continue
        found[op] = found.get(op, 0) + count
    return found


def guard_findings(rule_set: dict[str, Any], observations: list[dict[str, Any]]) -> list[Finding]:
    """Findings from the per-call guards (types, inputs, threads, ops, deferred changes)."""
    findings: list[Finding | None] = []
    lazy = sorted({k for o in observations for k in o.get("kinds", []) if k != "tensor"})
    if lazy:
        findings.append(make_finding(rule_set, "lazy_output", "forward returned " + ", ".join(lazy)))
    if any(o.get("input_mutated") for o in observations):
        findings.append(make_finding(rule_set, "input_mutation", "input values differ after forward returned"))
    if any(o.get("changed_after_return") for o in observations):
        findings.append(make_finding(rule_set, "deferred_work",
                                     "output values changed between forward's return and a later read"))
    threads = max((o.get("new_threads", 0) for o in observations), default=0)
    procs = max((o.get("new_processes", 0) for o in observations), default=0)
    if threads > 0 or procs > 0:
        findings.append(make_finding(rule_set, "spawned_threads",
                                     f"{threads} new thread(s) and {procs} new process(es) after forward"))
    ops: dict[str, int] = {}
    for o in observations:
        for name, count in o.get("ops", {}).items():
            ops[name] = ops.get(name, 0) + count
    library = library_ops(ops, rule_set["allowed_ops"])
    if library:
        listed = ", ".join(f"aten::{op} ×{n}" for op, n in sorted(library.items(), key=lambda kv: -kv[1])[:8])
        findings.append(make_finding(rule_set, "library_compute", listed))
    downcasts = sorted({d for o in observations for d in o.get("downcasts", [])})
    if downcasts:
        findings.append(Finding("precision_downgrade", "review",
                                "casts to lower precision inside forward: " + ", ".join(downcasts[:4]), family=13))
    return [f for f in findings if f is not None]


def watch_findings(rule_set: dict[str, Any], report: dict[str, Any]) -> list[Finding]:
    """``library_compute`` from what the watch saw start inside forward calls (every call, the
    timed ones too): operators neither the candidate's own nor allocation/view/copy, whatever
    dispatch keys were excluded; device kernels not from its sources; calls that reached NumPy."""
    if not report or not report.get("watched"):
        return []
    parts = []
    for key, what in (("library_ops", "operators"), ("library_kernels", "device kernels"), ("numpy", "NumPy calls")):
        found = report.get(key) or {}
        if found:
            listed = ", ".join(f"{name[:80]} ×{n}" for name, n in sorted(found.items(), key=lambda kv: -kv[1])[:6])
            parts.append(f"{what}: {listed}")
    switched = report.get("records_switched_off") or 0
    if switched:
        parts.append(f"tried {switched} time(s) to switch the profiler's operator records off")
    findings = []
    if parts:
        f = make_finding(rule_set, "library_compute", "seen inside forward on every call: " + "; ".join(parts))
        if f is not None:
            findings.append(f)
    return findings


def linkage_findings(rule_set: dict[str, Any], objects: dict[str, Any]) -> list[Finding]:
    """``library_binding``: the native objects the candidate could have written (linkage.py) bind
    library compute, look symbols up at run time, or cannot be read (stripped, replaced since)."""
    from .build import linkage

    if not objects or not rule_set["dynamic"].get("library_binding", {}).get("enabled", False):
        return []
    paths = linkage.candidate_objects(objects.get("before") or {}, objects.get("after") or {},
                                      objects.get("own_roots") or ())
    reports = []
    for path in paths:
        inode = (objects.get("after") or {}).get(path)
        try:
            same = os.stat(path).st_ino == inode
        except OSError:
            same = False
        if not same:
            reports.append(linkage.ObjectReport(path, readable=False, error="gone or replaced since it was loaded"))
            continue
        reports.append(linkage.inspect_object(path))
    compute, lookups, unreadable = linkage.summarise(reports)
    details = ([f"binds {', '.join(compute)}"] if compute else []) + (
        [f"looks symbols up at run time ({', '.join(lookups)})"] if lookups else []) + (
        [f"unreadable bindings ({', '.join(unreadable)})"] if unreadable else [])
    f = make_finding(rule_set, "library_binding", "; ".join(details)) if details else None
    return [f] if f is not None else []


def unjoined_stream_finding(rule_set: dict[str, Any], stats: dict[str, Any],
                            report: dict[str, Any]) -> Finding | None:
    """``unjoined_stream`` (strict): the end-to-end time was more than the forward's stream explains
    (``timed: "end to end"``) and the watch saw forward's kernels on a stream the judge's work never
    used: work the timer's stream did not join, however the stream was made (torch, runtime,
    driver API)."""
    elsewhere = (report or {}).get("other_stream_kernels") or {}
    if stats.get("timed") != "end to end" or not elsewhere:
        return None
    listed = ", ".join(f"{name[:60]} ×{n}" for name, n in sorted(elsewhere.items(), key=lambda kv: -kv[1])[:4])
    return make_finding(rule_set, "unjoined_stream", f"{listed}; {stats.get('net_median_ms', 0):.4g} ms end to end "
                        f"against {stats.get('gpu_median_ms', 0):.4g} ms on the timer's stream")


def unanswered_sets(timing: dict[str, Any] | None, rotations: list[dict[str, Any] | None]) -> list[Any]:
    """The input sets a timing says it fingerprinted (``[set, fingerprint]`` pairs, from the candidate's
    process) for which the reference has no answer yet: the sets kept whole were answered, outputs and
    fingerprint, before the candidate started, and asking again would replace those outputs with a
    fingerprint alone. Whatever else is there is left for ``fingerprint_finding`` to refuse."""
    fingerprints = (timing or {}).get("fingerprints")
    if not isinstance(fingerprints, list):
        return []
    named = [entry[0] for entry in fingerprints if isinstance(entry, list | tuple) and len(entry) == 2]
    return [r for r in named if not (type(r) is int and 0 <= r < len(rotations) and rotations[r] is not None)]


def fingerprint_finding(rule_set: dict[str, Any], fingerprints: list[Any],
                        rotations: list[dict[str, Any] | None]) -> Finding | None:
    """``timed_fingerprint_mismatch``: some timed call's output is not its own input set's answer, or
    names a set the reference has no answer for (none made: not one of this evaluation's sets)."""
    wrong = []
    for entry in fingerprints:
        r, got = entry if isinstance(entry, list | tuple) and len(entry) == 2 else (None, None)
        ref = rotations[r] if type(r) is int and 0 <= r < len(rotations) else None
        if ref is None or "fingerprint" not in ref:
            wrong.append(f"input set {r!r}: no reference answer for it")
            continue
        why = fingerprint_mismatch(got, ref["fingerprint"], ref["bounds"])
        if why:
            wrong.append(f"input set {r + 1}: {why}")
    if not wrong:
        return None
    return make_finding(rule_set, "timed_fingerprint_mismatch",
                        f"{len(wrong)} of {len(fingerprints)} timed calls; " + "; ".join(wrong[:3]))


def late_change_finding(rule_set: dict[str, Any], stats: dict[str, Any]) -> Finding | None:
    """``deferred_work`` from the timing: a timed call's output read again once the device was idle
    did not give the checksums the window's own read of it gave (``isolation.late_changes``), so
    work on it went on after the timer stopped. Unlike the trials' read at return, this does not
    depend on who wins a race: the window's read is inside the time whatever it saw."""
    changed = int(stats.get("changed_after_read") or 0)
    if not changed:
        return None
    return make_finding(rule_set, "deferred_work", f"{changed} timed call(s) of {stats.get('iterations')}: the "
                        "output's checksums changed between the timed window's read and a read once the "
                        "device was idle")


def thread_budget_finding(rule_set: dict[str, Any], stats: dict[str, Any], threads: int) -> Finding | None:
    """``thread_budget``: CPU time inside the timed windows beyond the baselines' thread budget, over
    all of them or over their shorter half (the calls the reward's median stands on: idle calls
    padded in between dilute the first, never the second)."""
    slack = float(rule_set["thresholds"].get("thread_slack", 1.25))
    for cpu, wall, which in ((stats.get("cpu_s"), stats.get("window_s"), "timed calls"),
                             (stats.get("cpu_fast_s"), stats.get("window_fast_s"), "shorter half of the timed calls")):
        if not cpu or not wall or cpu <= threads * wall * slack + 0.002:
            continue
        return make_finding(rule_set, "thread_budget", f"{cpu * 1e3:.1f} ms of CPU in {wall * 1e3:.1f} ms of the "
                            f"{which} ({cpu / wall:.2f} threads busy; the baselines ran on {threads})")
    return None


def repeat_finding(rule_set: dict[str, Any], stats: dict[str, Any], series: str = "") -> Finding | None:
    """``cached_repeats``: every timing input ran far faster once seen than on its first sight (a
    cache keyed on values). The fastest first sight is compared, not their median: a cache misses
    on every first sight, while a busy host delays single iterations (one slow iteration among
    three is no cache, and neither are two). ``series="e2e_"`` reads the end-to-end iterations'
    own input sets (CUDA)."""
    first = stats.get(f"{series}first_sight_min_ms", stats.get(f"{series}first_sight_median_ms"))
    repeat = stats.get(f"{series}repeat_median_ms")
    ratio = float(rule_set["thresholds"]["repeat_ratio"])
    if first and repeat and first > ratio * repeat and first - repeat > 0.05:
        where = "end-to-end timing input" if series else "timing input"
        return make_finding(rule_set, "cached_repeats", f"{first:.4g} ms at the fastest first sight of each "
                            f"{where}, {repeat:.4g} ms on repeats")
    return None


def unseen_work_finding(rule_set: dict[str, Any], stats: dict[str, Any]) -> Finding | None:
    """``unseen_work``: the timing took the end-to-end time because the forward's stream and host
    times left much of it unexplained (timing.time_callable); the reward stands on the larger time,
    and a person sees why."""
    if stats.get("timed") != "end to end":
        return None
    return make_finding(rule_set, "unseen_work", f"{stats['net_median_ms']:.4g} ms end to end (net of an empty "
                        f"iteration) against {stats['gpu_median_ms']:.4g} ms on the forward's stream and "
                        f"{stats['host_median_ms']:.4g} ms on the host")


def device_time_finding(rule_set: dict[str, Any], stats: dict[str, Any],
                        report: dict[str, Any] | None) -> Finding | None:
    """``device_time``: where the watch ran (strict, CUDA), CUPTI's own records say how long each
    forward call's kernels ran on the device (``watch.attribute``: the union of their intervals).
    Every timer the reward's time comes from lives in the candidate's process, and a native patch
    of the event timer can make it report less than passed; CUPTI's activity records are not made
    through those calls. An honest timing brackets its kernels, so it can never be shorter; the
    median over the calls that launched kernels stands against one call misread."""
    spans = [float(s) for s in (report or {}).get("kernel_spans_us") or () if s]
    reported = stats.get("median_ms")
    if len(spans) < 3 or not reported:
        return None
    device_ms = statistics.median(spans) / 1e3
    if float(reported) < float(rule_set["thresholds"]["device_time_factor"]) * device_ms - 0.002:
        return make_finding(rule_set, "device_time",
                            f"the timing reported {float(reported):.4g} ms, but the forward's kernels ran "
                            f"{device_ms:.4g} ms per call on the device by CUPTI's records (median of "
                            f"{len(spans)} calls)")
    return None


def explained_ms(stats: dict[str, Any]) -> float:
    """What of a timing's wall clock the forward's own reported times account for: every timed
    window (``total_ms``), the end-to-end iterations' forwards and the spins queued before the
    windows (CUDA). What is left, per timed iteration, is the loop's own cost."""
    return float(stats.get("total_ms") or 0.0) + float(stats.get("e2e_total_ms") or 0.0) \
        + float(stats.get("spin_total_ms") or 0.0)


def outside_waits_ms(descheduled_ms: float | None, stats: dict[str, Any]) -> float:
    """Of the timing thread's waits for a CPU over the span (``descheduled_ms``), those outside the
    timed windows. On the CPU a window's reported time holds the waits inside it (the forward runs
    in the timing thread), which the child counts (``window_waits_ms``); taken off twice, a busy
    host's baseline had a loop cost below zero and an honest candidate's loop looked like hidden
    time. A count above the span's is held to it: reporting more only leaves more unexplained."""
    waited = max(float(descheduled_ms or 0.0), 0.0)
    try:
        inside = float(stats.get("window_waits_ms") or 0.0)
    except (TypeError, ValueError):
        inside = 0.0
    return waited - min(max(inside, 0.0), waited)


def loop_cost_ms(wall_ms: float | None, descheduled_ms: float | None, stats: dict[str, Any]) -> float | None:
    """The timing loop's own cost per timed iteration (copying the inputs in, the L2 flush, the
    synchronise, keeping and fingerprinting the output, the empty round trips): the parent's wall
    clock over the loop, less what the host's load added outside the windows (the timing thread
    waiting for a CPU, ``outside_waits_ms``) and what the reported times explain. Measured on a
    trusted baseline, whose loop does the same judge's work around the same shapes;
    ``timer_finding`` sets it against a candidate's."""
    if not wall_ms or not stats.get("iterations"):
        return None
    return (wall_ms - outside_waits_ms(descheduled_ms, stats) - explained_ms(stats)) / stats["iterations"]


def timer_finding(rule_set: dict[str, Any], *, wall_ms: float | None, stats: dict[str, Any],
                  overhead_ms_per_iter: float | None, descheduled_ms: float | None = None) -> Finding | None:
    """The parent's view of a candidate's timing (``wall_ms``: accounting.TimedSpan) must be
    explained by the times it reported.

    Every timer whose figure becomes the reward lives in the candidate's process, where a native
    patch (of ``cudaEventElapsedTime``, of ``clock_gettime``, of the interpreter's own clock) can make
    it report less than passed; the parent's view is out of its reach. Three checks, in turn:

    * the child's own clock over the span the parent timed (``span_ms``) must agree with the
      parent's, within ``clock_slack`` and ``clock_floor_ms`` (the statistics after the loop, the
      messages): a process clock patched slow;
    * on CUDA, the reported time must account for what the host's clock saw each timed window keep
      the GPU busy (``host_gpu_ms``, ``timing.host_gpu_costs``: the same iterations, so no loop cost
      in between), within ``window_slack`` and ``window_floor_ms``: an event timer that lies while
      the host's clock, held true by the first check, does not;
    * the span over the loop is the loop's own cost per iteration (``overhead_ms_per_iter``:
      ``loop_cost_ms`` of the trusted baseline's timing, the same loop around the same shapes)
      times the iterations, plus what the reported times explain (``explained_ms``), plus what the
      host's load added outside them (``outside_waits_ms`` of ``descheduled_ms``, the timing thread
      runnable but not running: a busy host, never a wait on the GPU, which spins). Whatever is left
      over beyond ``timer_slack`` of the reported times and ``timer_loop_slack`` of the loop's cost
      (its noise from one timing to the next; every iteration also gets ``timer_floor_ms``) is time the reported figures hide: a
      clock that keeps its books, slow inside the forward and fast outside. Sums, not medians, on
      both sides: the span is one.

    Any of them withholds the speed reward (``withhold_speed``) until a person clears it, so a
    forged timer gains at most the slack.
    """
    if wall_ms is None or not stats.get("iterations"):
        return None
    thresholds = rule_set["thresholds"]
    span = stats.get("span_ms")
    if span is not None and float(span) < (1.0 - float(thresholds["clock_slack"])) * wall_ms \
            - float(thresholds["clock_floor_ms"]):
        # the child's own clock over the span the parent timed ran slow: every time it reported is suspect
        return make_finding(rule_set, "timer_mismatch",
                            f"the child's clock saw {float(span):.1f} ms from the start of its timing to its end, "
                            f"the parent's {wall_ms:.1f} ms")
    host_gpu, reward = stats.get("host_gpu_ms"), stats.get("median_ms")
    if host_gpu is not None and reward is not None and float(reward) < (
            1.0 - float(thresholds["window_slack"])) * float(host_gpu) - float(thresholds["window_floor_ms"]):
        # the event timer reports less than the host's own clock saw the GPU busy around each window
        return make_finding(rule_set, "timer_mismatch",
                            f"the host's clock saw each timed window keep the GPU busy {float(host_gpu):.4g} ms "
                            f"(median, less the spin, an empty launch's round trip and the read), the timer "
                            f"reported {float(reward):.4g} ms")
    if overhead_ms_per_iter is None:
        return None
    iterations = int(stats["iterations"])
    explained = explained_ms(stats)
    loop = max(float(overhead_ms_per_iter), 0.0)
    waited = outside_waits_ms(descheduled_ms, stats)
    unexplained = max(wall_ms - waited, 0.0) - iterations * loop - explained
    # an identity candidate's loop has cost up to 0.7 of its baseline's loop cost more (the CPU, a 2-core
    # CI host) and 0.3-1.2 ms an iteration more on CUDA (an H100, L1 and L2), where the window check
    # above is the tight one
    loop_slack = thresholds["timer_loop_slack_cuda" if stats.get("gpu_median_ms") is not None else "timer_loop_slack"]
    allowed = float(thresholds["timer_slack"]) * explained + iterations * (
        float(loop_slack) * loop + float(thresholds["timer_floor_ms"]))
    if unexplained > allowed:
        return make_finding(rule_set, "timer_mismatch",
                            f"the parent's wall clock saw {unexplained:.1f} ms more than the reported times "
                            f"({explained:.1f} ms over {iterations} iterations) and the loop's own cost "
                            f"({loop:.3f} ms an iteration) explain, beyond the {allowed:.1f} ms allowed"
                            + (f"; {waited:.1f} ms waiting for a CPU outside the timed calls left out"
                               if waited else ""))
    return None
