"""The verdict, computed in the parent from raw observations the children sent.

Nothing here runs candidate code: it compares tensors against the trusted reference and turns the
candidate child's observations (op traces, thread counts, timings) into findings.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from .rules import make_finding
from .schema import Finding
from .settings import current


@dataclass
class Comparison:
    ok: bool
    reason: str = ""
    max_abs: float = 0.0
    rel_norm: float = 0.0  # normwise relative error against the float64 reference
    ref_rel_norm: float = 0.0  # the fp32 reference's own error against float64


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


_CHUNK = 1 << 18  # elements per pass: float64 temporaries stay in cache instead of streaming 10× through memory
_DEVICE_CHUNK = 1 << 24  # on a GPU (outputs compared on the device): fewer passes, each a few synchronisations


def _finite(x: torch.Tensor) -> bool:
    """Whether every value is finite, in one pass: a sum is finite only if every term is (NaN and
    infinities carry through it); a finite sum that overflowed says no, and the caller checks
    element by element."""
    return x.numel() == 0 or math.isfinite(float(x.sum()))


def _compare_real(c: torch.Tensor, r: torch.Tensor, r64: torch.Tensor | None, label: str, atol: float, rtol: float,
                  result: Comparison) -> Comparison | None:
    """One pass over the output in cache-sized chunks: NaN/Inf, max error, tolerance, and the sums of
    squares for the error against float64. Failures are reported in this order: non-finite values
    first, then the tolerance (with the worst element), then the float64 error. A chunk whose values
    are all finite (nearly always) takes the short way: no masks, and the worst element is looked for
    only where the tolerance failed."""
    cf, rf = c.reshape(-1), r.reshape(-1)
    wf = r64.reshape(-1) if r64 is not None and r64.numel() == r.numel() else None
    bad = 0
    max_abs = 0.0
    worst_excess, worst_at = -float("inf"), 0
    outside = False
    sq_ref = sq_err = sq_own = 0.0
    chunk = _DEVICE_CHUNK if rf.is_cuda else _CHUNK
    for start in range(0, rf.numel(), chunk):
        cd = cf[start:start + chunk].double()
        rd = rf[start:start + chunk].double()
        diff = cd - rd
        all_finite = _finite(diff) and _finite(rd)  # both finite: a finite candidate minus a finite reference
        if all_finite:
            diff.abs_()
            tolerance = rd.abs().mul_(rtol).add_(atol)
            chunk_outside = bool((diff > tolerance).any())
        else:
            finite_r = torch.isfinite(rd)
            bad += int((~torch.isfinite(cd) & finite_r).sum())
            diff.abs_().masked_fill_(~finite_r, 0.0)
            same = (cd == rd) | (torch.isnan(cd) & torch.isnan(rd))
            outside |= bool((~finite_r & ~same).any())
            tolerance = rd.abs().mul_(rtol).add_(atol)
            chunk_outside = True  # the worst element is looked for below, NaN differences counted
        if diff.numel():
            max_abs = max(max_abs, float(diff.max()))
        if chunk_outside and diff.numel():
            excess = diff - tolerance
            if not all_finite:
                excess.masked_fill_(~finite_r, -float("inf"))
            top = int(torch.argmax(excess))
            top_excess = float(excess[top])
            outside |= top_excess > 0 or bool(torch.isnan(excess).any())
            if top_excess > worst_excess:
                worst_excess, worst_at = top_excess, start + top
        if wf is not None:
            wd = wf[start:start + chunk]
            if not _finite(wd):
                finite_w = torch.isfinite(wd)
                wd = torch.where(finite_w, wd, 0.0)
                cd = torch.where(finite_w, cd, 0.0)
                rd = torch.where(finite_w, rd, 0.0)
            sq_ref += float(torch.dot(wd, wd))
            err = cd - wd
            sq_err += float(torch.dot(err, err))
            err = torch.sub(rd, wd, out=err)
            sq_own += float(torch.dot(err, err))
    if bad:
        return Comparison(False, f"{label} has {bad} NaN/Inf values where the reference is finite")
    result.max_abs = max(result.max_abs, max_abs)
    if outside:
        return Comparison(False, f"{label} differs from the reference: max abs error {max_abs:.3g} "
                                 f"(atol={atol}, rtol={rtol}; worst at flat index {worst_at})", max_abs=max_abs)
    if wf is not None:
        scale = max(sq_ref ** 0.5, 1e-30)
        rel, own = sq_err ** 0.5 / scale, sq_own ** 0.5 / scale
        result.rel_norm = max(result.rel_norm, rel)
        result.ref_rel_norm = max(result.ref_rel_norm, own)
        if rel > rtol:
            return Comparison(False, f"{label}: relative error {rel:.3g} against the float64 reference "
                                     f"exceeds rtol={rtol} (near-zero outputs cannot hide behind atol)",
                              max_abs=result.max_abs, rel_norm=rel)
    return None


def _compare_complex(c: torch.Tensor, r: torch.Tensor, label: str, atol: float, rtol: float,
                     result: Comparison) -> Comparison | None:
    bad = ~torch.isfinite(c) & torch.isfinite(r)
    if bool(bad.any()):
        return Comparison(False, f"{label} has {int(bad.sum())} NaN/Inf values where the reference is finite")
    diff = (c.to(torch.complex128) - r.to(torch.complex128)).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    result.max_abs = max(result.max_abs, max_abs)
    if not torch.allclose(c, r, atol=atol, rtol=rtol, equal_nan=True):
        return Comparison(False, f"{label} differs from the reference: max abs error {max_abs:.3g} "
                                 f"(atol={atol}, rtol={rtol})", max_abs=max_abs)
    return None


def compare_outputs(cand: list[Any], ref: list[Any], ref64: list[Any] | None, atol: float, rtol: float) -> Comparison:
    """Structure, exact type, dtype, shape, NaN/Inf, tolerance, then error against float64."""
    if len(cand) != len(ref):
        return Comparison(False, f"returned {len(cand)} outputs, the reference returns {len(ref)}")
    result = Comparison(True)
    for k, (c, r) in enumerate(zip(cand, ref)):
        label = f"output {k}" if len(ref) > 1 else "the output"
        if not isinstance(r, torch.Tensor):
            if c != r:
                return Comparison(False, f"{label} is {c!r}, expected {r!r}")
            continue
        if not isinstance(c, torch.Tensor):
            return Comparison(False, f"{label} is {c} instead of a torch.Tensor")
        if c.dtype != r.dtype:
            return Comparison(False, f"{label} has dtype {c.dtype}, expected {r.dtype}")
        if tuple(c.shape) != tuple(r.shape):
            return Comparison(False, f"{label} has shape {tuple(c.shape)}, expected {tuple(r.shape)}")
        if not r.is_floating_point() and not r.is_complex():
            if not torch.equal(c, r):
                mismatches = int((c != r).sum())
                return Comparison(False, f"{label}: {mismatches} of {r.numel()} values differ")
            continue
        if r.is_complex():
            failure = _compare_complex(c, r, label, atol, rtol, result)
        else:
            r64 = ref64[k] if ref64 is not None and k < len(ref64) and isinstance(ref64[k], torch.Tensor) else None
            failure = _compare_real(c, r, r64, label, atol, rtol, result)
        if failure is not None:
            return failure
    return result


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
    watch: dict[str, Any] = field(default_factory=dict)  # child/watch.py's report (strict track)
    objects: dict[str, Any] = field(default_factory=dict)  # executable mappings before/after, writable roots
    # Processes of the candidate's tree (besides the child) found running at a message: (step, pids),
    # the first such step only; counted by the parent at every message, from import to exit.
    strays: list[Any] = field(default_factory=list)


def fingerprint_mismatch(got: list[list[float] | None], want: list[list[float] | None],
                         bounds: list[list[float] | None]) -> str | None:
    """Why a timed call's fingerprint (child.isolation.Fingerprint) cannot come from an output within
    the tolerance of the reference's for the same inputs (None: it can)."""
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


def fingerprint_finding(rule_set: dict[str, Any], fingerprints: list[Any],
                        rotations: list[dict[str, Any]]) -> Finding | None:
    """``timed_fingerprint_mismatch``: some timed call's output is not its own input set's answer."""
    wrong = []
    for r, got in fingerprints:
        ref = rotations[r] if 0 <= r < len(rotations) else None
        if ref is None or "fingerprint" not in ref:
            continue
        why = fingerprint_mismatch(got, ref["fingerprint"], ref["bounds"])
        if why:
            wrong.append(f"input set {r + 1}: {why}")
    if not wrong:
        return None
    return make_finding(rule_set, "timed_fingerprint_mismatch",
                        f"{len(wrong)} of {len(fingerprints)} timed calls; " + "; ".join(wrong[:3]))


def thread_budget_finding(rule_set: dict[str, Any], stats: dict[str, Any], threads: int) -> Finding | None:
    """``thread_budget``: CPU time inside the timed windows beyond the baselines' thread budget."""
    cpu, wall = stats.get("cpu_s"), stats.get("window_s")
    if not cpu or not wall:
        return None
    slack = float(rule_set["thresholds"].get("thread_slack", 1.25))
    if cpu <= threads * wall * slack + 0.002:
        return None
    return make_finding(rule_set, "thread_budget", f"{cpu * 1e3:.1f} ms of CPU in {wall * 1e3:.1f} ms of timed calls "
                        f"({cpu / wall:.2f} threads busy; the baselines ran on {threads})")


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


def timer_finding(rule_set: dict[str, Any], *, wall_ms: float | None, stats: dict[str, Any],
                  overhead_ms_per_iter: float | None, descheduled_ms: float | None = None) -> Finding | None:
    """The wall clock the parent held must be explained by the times the child reported.

    Per iteration, the parent's wall time minus the loop's own overhead (measured on the trusted
    baseline, same loop) must not dwarf the reported kernel time: a forged or blind timer reports
    far less than the time that really passed. The time the child's timing thread spent waiting for
    a CPU (``descheduled_ms``, read by the parent from the scheduler) passed on the host's account,
    not the GPU's: it is left out. Waiting on the GPU, by spinning or sleeping, is never in it.
    """
    if wall_ms is None or overhead_ms_per_iter is None or not stats.get("iterations"):
        return None
    per_iter_wall = max(wall_ms - (descheduled_ms or 0.0), 0.0) / stats["iterations"]
    unexplained = per_iter_wall - max(overhead_ms_per_iter, 0.0)
    reported = float(stats["median_ms"])
    slack = float(rule_set["thresholds"]["timer_slack"])
    if unexplained > slack * reported + 1.0:
        return make_finding(rule_set, "timer_mismatch",
                            f"the parent saw {per_iter_wall:.3f} ms of wall-clock time per iteration "
                            f"({overhead_ms_per_iter:.3f} ms of it the loop's own overhead"
                            + (f"; {descheduled_ms:.1f} ms waiting for a CPU left out" if descheduled_ms else "")
                            + f"), but the reported kernel time is {reported:.3f} ms")
    return None
