"""The verdict: the candidate's evidence judged against the reference's outputs and timings into
findings, a status, timings and speedups with their intervals; then every result finished the same
way (findings deduplicated, rejects applied, the rule set, reward config, settings and reward kept)."""

from __future__ import annotations

import time
from typing import Any

from .. import judge
from ..build.compile import threads_for
from ..child import spread
from ..hardware import ceilings
from ..reward import compute_reward
from ..rules import make_finding
from ..schema import EvalRequest, EvalResult, Finding
from ..settings import EvaluatorSettings
from ..tasks import facts as taskfacts

# The review line for a speedup over eager is this many times higher while the task's eager
# baseline rests on fewer timings than it keeps (taskfacts.samples()): a fresh reference process's
# first timing has come out 3.7x slow on the CPU (0.48 against 0.13 ms), which alone carried an honest
# 2.5x kernel past a 10x line. A speedup beyond even this is flagged at once.
UNSETTLED_LINE = 4.0


def _baseline_stats(entry: dict[str, Any]) -> dict[str, Any]:
    """A baseline's timing as a result shows it: the kept sample that stands (tasks/facts.py), every kept
    sample's median and their spread."""
    if not entry.get("stats"):
        return {"error": entry.get("error")}
    return {**entry["stats"], "samples_ms": entry.get("samples_ms"), "samples_spread": entry.get("samples_spread"),
            # the parent's wall clock over the loop and the loop's own cost per iteration (judge.timer_finding)
            "wall_ms": entry.get("wall_ms"), "descheduled_ms": entry.get("descheduled_ms"), "wall": entry.get("span"),
            "overhead_ms_per_iter": entry.get("overhead_ms_per_iter"),
            "paired": entry.get("paired")}  # timed in alternation with the kernel, in this evaluation


def with_paired(reference: dict[str, Any]) -> dict[str, Any]:
    """The baselines this result is set against: where the kernel was timed in alternation with its
    eager baseline (``pipeline/pairing.py``), that timing of it, not the kept one (whose samples still
    say how settled it is)."""
    baselines = dict(reference.get("baselines") or {})
    entry = (reference.get("paired") or {}).get("entry")
    if entry:
        kept = baselines.get("eager") or {}
        baselines["eager"] = {**entry, "samples_ms": kept.get("samples_ms"), "samples_spread": kept.get("samples_spread")}
        if entry.get("overhead_ms_per_iter") is None:  # the pairing's clock did not stand (pairing._finish)
            baselines["eager"]["overhead_ms_per_iter"] = kept.get("overhead_ms_per_iter")
    return baselines


def _speedup_intervals(request: EvalRequest, timing: dict[str, Any], baselines: dict[str, Any],
                       machine: dict[str, list[float]]) -> dict[str, Any]:
    """Each speedup's 95% interval: the kernel's median interval against the baseline's (across its
    kept evaluations where three or more are kept, else within its one timing). A median from one
    evaluation is one draw of how far evaluations move from one to the next, which its own samples'
    interval does not hold (host-bound timings moved by up to 1.9x between processes on the H200): so
    the kernel's interval holds that run-to-run spread, the baseline's kept evaluations' where they
    show it for the same kind of timing (both host-bound or both kernel-side: ``spread.widened``),
    else the machine's (``machine``: ``taskfacts.load_run_to_run``), and so does a baseline's from one
    or two evaluations. Without either, the intervals are the timings' own."""
    out: dict[str, Any] = {}
    kernel_kind = str(timing.get("timed") or "")
    for name in request.baselines:
        entry = baselines.get(name) or {}
        if entry.get("paired"):  # timed in alternation with the kernel: the same stretches of the host's speed
            out[name] = spread.speedup_interval((entry.get("stats") or {}).get("spread_ms"), timing.get("spread_ms"))
            continue
        kept = entry.get("samples_spread") or {}
        stats = entry.get("stats") or {}
        base_kind = str(stats.get("timed") or "")
        across = spread.run_to_run_factors(kept)
        if across is not None:
            side = kept
            factors = across if base_kind == kernel_kind else machine.get(kernel_kind)
        else:
            side = spread.widened(stats.get("spread_ms"), machine.get(base_kind))
            factors = machine.get(kernel_kind)
        out[name] = spread.speedup_interval(side, spread.widened(timing.get("spread_ms"), factors))
    return out


def _keep(findings: list[Finding], finding: Finding | None) -> None:
    """Dynamic checks a rule set switches off produce no finding."""
    if finding is not None:
        findings.append(finding)


def _compared(observation: dict[str, Any], expected: dict[str, Any], atol: float, rtol: float) -> judge.Comparison:
    """The comparison of one call's outputs: made on the device by the reference child where the
    parent put it there (``checked``: GPU-sized outputs never reach this process), else here."""
    checked = observation.get("checked")
    if checked is not None:
        return judge.Comparison(**checked)
    return judge.compare_outputs(observation["outputs"], expected["outputs"], expected.get("outputs64"), atol, rtol)


def judge_evidence(request: EvalRequest, rule_set: dict[str, Any], hardware: dict[str, Any],
                   reference: dict[str, Any], evidence: judge.Evidence) -> tuple[EvalResult, list[Finding]]:
    """The evidence against the reference: correctness of every trial and every timed output, the
    integrity findings, timings and speedups (the result is finished by ``finish``)."""
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
        cmp = _compared(trial, ref, request.atol, request.rtol)
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
            ref = reference["rotations"][r] if type(r) is int and 0 <= r < len(reference["rotations"]) else None
            if ref is None or ref.get("outputs") is None:  # the set named is not one the reference kept whole
                timed_failures.append(f"timing input set {r!r}: no whole reference output for it")
                continue
            cmp = judge.compare_outputs(kept, ref["outputs"], ref.get("outputs64"), request.atol, request.rtol)
            if not cmp.ok:
                timed_failures.append(f"timing input set {r + 1}: {cmp.reason}")
        cmp = _compared(evidence.after, reference["after"], request.atol, request.rtol)
        if not cmp.ok:
            timed_failures.append(f"fresh input after timing: {cmp.reason}")
        if timed_failures:
            f = make_finding(rule_set, "timed_output_mismatch", "; ".join(timed_failures[:3]))
            _keep(findings, f)
        again = _compared(evidence.again, {"outputs": evidence.trials[0].get("outputs")},
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

    # degenerate task: near-constant reference output (its spread measured by the reference child)
    spreads = [v for v in reference["trials"][0].get("spread") or [] if v is not None]
    if spreads and all(std <= float(thresholds["degenerate_std"]) * (mean_abs + 1e-12) for std, mean_abs in spreads):
        f = make_finding(rule_set, "degenerate_task", "the reference output barely varies across inputs")
        _keep(findings, f)

    # timings and speedups
    timing = evidence.timing or {}
    kernel_ms = timing.get("median_ms")
    timings_ms: dict[str, float | None] = {"kernel": kernel_ms}
    speedup: dict[str, float | None] = {}
    baselines = with_paired(reference)
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
        _keep(findings, judge.device_time_finding(rule_set, timing, evidence.watch))
    if correct:
        _keep(findings, judge.late_change_finding(rule_set, timing))
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
                      "speedup_interval": _speedup_intervals(request, timing, baselines,
                                                             reference.get("run_to_run") or {}),
                      "run_to_run": reference.get("run_to_run") or {},
                      "wall_ms": evidence.timing_wall_ms, "descheduled_ms": evidence.timing_descheduled_ms,
                      "wall": evidence.timing_span},
    )
    return result, findings


def finish(result: EvalResult, findings: list[Finding], request: EvalRequest, rule_set: dict[str, Any],
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
