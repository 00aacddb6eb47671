"""KernelBench as published, through the pool: every task's reference copied as ``ModelNew`` (the
identity candidate), on the open track, one JSONL row per evaluation, then a summary.

    python bench/kernelbench_sweep.py --device cuda --workers 16 --out sweep.jsonl
    python bench/kernelbench_sweep.py --device cuda --workers 1 --repeat 3 --plain --out repro.jsonl
    python bench/kernelbench_sweep.py --device cpu --max-elements 16384 --tasks level1/19_ReLU --out smoke.jsonl

Resumable: rows already in ``--out`` (same task and repeat) are not evaluated again, so an
interrupted sweep continues where it stopped; the summary covers every row in the file. With
``--plain`` each task is also timed the plain way (``bench/plain_timing.py``: CUDA events around
each call, warm-ups, fixed inputs, a 256 MB L2 flush) in a process of its own, after its evaluation,
holding the GPU alone: the agreement of the two methods is measured in the same run. ``--repeat K``
evaluates each task K times (a separate evaluation each) and the summary gives each task's max/min.
Every evaluation's phases and messages are written as they happen to ``--progress`` (default: the
out file's name with ``.progress.log``), so a sweep cut off by a time box still shows where each
evaluation in flight was.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpu_workers.schema import is_infrastructure  # noqa: E402 - after the checkout is on the path


def _phase_seconds(timeline: list[list[Any]]) -> dict[str, float]:
    """Seconds from the evaluation's start to each phase's end, from the result's timeline."""
    marks: dict[str, float] = {}
    for label, at in timeline:
        marks.setdefault(label, at)
    out = {}
    # a reference child that stays beside the candidate ends its phase with "checking"
    for phase, labels in (("compile", ("compile: done",)), ("reference", ("reference: done", "reference: checking")),
                          ("candidate", ("candidate: done",)), ("judge", ("judge: done",))):
        seen = [marks[label] for label in labels if label in marks]
        if seen:
            out[phase] = min(seen)
    return out


def _short(message: str, keep: int = 900) -> str:
    """The message's first line and its end (a traceback's error is its last line)."""
    if len(message) <= keep:
        return message
    first = message.split("\n", 1)[0][:200]
    return f"{first}\n[...]\n{message[-(keep - len(first)):]}"


_WALL_KEYS = ("median_ms", "gpu_median_ms", "host_median_ms", "e2e_median_ms", "round_trip_ms", "iterations",
              "e2e_iterations", "total_ms", "e2e_total_ms", "spin_total_ms", "span_ms", "host_gpu_ms",
              "host_round_trip_ms", "spin_rate", "spin_cycles", "read_ms")


def row_for(key: str, repeat: int, result: Any, wall_s: float) -> dict[str, Any]:
    stats = result.timing_stats or {}
    kernel = stats.get("kernel") or {}
    slot = stats.get("gpu_slot") or {}
    spreads = {name: (stats.get(name) or {}).get("spread_ms") for name in ("kernel", "eager", "compile")}
    return {
        "task": key, "repeat": repeat, "status": result.status, "message": _short(result.message),
        "speedup": result.speedup, "timings_ms": result.timings_ms, "spread": spreads,
        "findings": [{"rule": f.rule, "severity": f.severity} for f in result.findings],
        "kernel_timed": kernel.get("timed"), "iterations": kernel.get("iterations"),
        # timed in alternation with its eager baseline (pipeline/pairing.py): rounds, iterations a round, CPU
        "eager_paired": (stats.get("eager") or {}).get("paired"),
        # the host warm-up of each timing: how long, whether its host time got steady
        "host_warm": {n: (stats.get(n) or {}).get("host_warm") for n in ("kernel", "eager", "compile")},
        "baseline_samples_ms": {n: (stats.get(n) or {}).get("samples_ms") for n in ("eager", "compile")},
        "phases_s": _phase_seconds(stats.get("timeline") or []), "duration_s": result.duration_s,
        # every mark of the evaluation (seconds from its start): where a long one's time went
        "timeline": stats.get("timeline"),
        "wall_s": round(wall_s, 3), "gpu_exclusive_s": slot.get("exclusive_s"), "gpu_held_s": slot.get("held_s"),
        "gpu_wait_s": slot.get("wait_s"), "cpu_s": stats.get("cpu_s"),
        # what holds timings back: seconds waited as a timer, and each step's longest stretch of shared hold
        "gpu_timer_wait_s": slot.get("exclusive_wait_s"), "gpu_timings": slot.get("exclusive_acquisitions"),
        # stopped mid-stretch for other evaluations' timings, and each timing's wait for the GPU to drain
        "gpu_stops": slot.get("stops"), "gpu_stopped_s": slot.get("stopped_s"),
        "drain_s": {n: ((stats.get(n) or {}).get("drain") or {}).get("drain_s") for n in ("kernel", "eager", "compile")},
        "gpu_longest_stretch_s": {step: max(v) for step, v in (slot.get("stretches") or {}).items() if v},
        "bytes": (stats.get("sizing") or {}).get("bytes"), "constants": (stats.get("sizing") or {}).get("constants"),
        "speedup_interval": stats.get("speedup_interval"), "memory": stats.get("memory"),
        # the machine's run-to-run spread the intervals held, by kind of timing (none until three tasks show theirs)
        "run_to_run": stats.get("run_to_run"),
        # what the parent's wall clock saw of each timing against what the child reported (timer_mismatch)
        "wall_check": {"kernel": {"wall_ms": stats.get("wall_ms"), "descheduled_ms": stats.get("descheduled_ms"),
                                  "wall": stats.get("wall"),
                                  **{k: kernel.get(k) for k in _WALL_KEYS}},
                       **{n: {"wall_ms": (stats.get(n) or {}).get("wall_ms"),
                              "descheduled_ms": (stats.get(n) or {}).get("descheduled_ms"),
                              "wall": (stats.get(n) or {}).get("wall"),
                              "overhead_ms_per_iter": (stats.get(n) or {}).get("overhead_ms_per_iter"),
                              **{k: (stats.get(n) or {}).get(k) for k in _WALL_KEYS}} for n in ("eager", "compile")}},
        "retries": stats.get("retries"),
        "gpu_memory_bytes": (result.hardware or {}).get("memory_bytes"),
    }


def _interval_kind(row: dict[str, Any]) -> str:
    """Which run-to-run spread a row's eager interval held (verdict._speedup_intervals): its kept
    baseline's (three or more evaluations), the machine's, or none beyond its timings' own; a
    baseline timed in alternation with the kernel holds none (it met the same stretches)."""
    if row.get("eager_paired"):
        return "paired"
    if len((row.get("baseline_samples_ms") or {}).get("eager") or []) >= 3:
        return "kept runs"
    return "the machine's" if (row.get("run_to_run") or {}).get(row.get("kernel_timed") or "") else "its own"


def _rows(out: Path) -> list[dict[str, Any]]:
    """The file's rows, the last one of each task and repeat (an evaluation made again replaces the
    one before it); a line cut short by an interruption is left out."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    if out.exists():
        for line in out.read_text().splitlines():
            try:
                row = json.loads(line)
                latest[(row["task"], int(row.get("repeat", 0)))] = row
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return list(latest.values())


def _done(out: Path) -> set[tuple[str, int]]:
    """What a resumed sweep need not evaluate again: every row but an infrastructure failure (the
    evaluator says ``infrastructure:``: a GPU that had no room, a neighbour's out-of-memory), which is
    no result of the task's."""
    return {(row["task"], int(row.get("repeat", 0))) for row in _rows(out)
            if not is_infrastructure(row.get("message", ""))}


def _plain(task_path: Path, kernel: str, device: str, max_elements: int | None, trials: int) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as handle:
        handle.write(kernel)
    command = [sys.executable, str(ROOT / "bench" / "plain_timing.py"), str(task_path), handle.name,
               "--device", device, "--trials", str(trials)]
    if max_elements:
        command += ["--max-elements", str(max_elements)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=ROOT)
    finally:
        Path(handle.name).unlink(missing_ok=True)
    if done.returncode != 0:
        return {"error": done.stderr[-1000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def summarize(rows: list[dict[str, Any]], wall_s: float | None, evaluated: int) -> str:
    lines = [f"rows: {len(rows)}   statuses: {dict(Counter(r['status'] for r in rows))}"]
    passed = [r for r in rows if r["status"] == "passed"]
    lines.append(f"passed: {len(passed)} of {len(rows)}")
    flagged = Counter(f"{f['rule']} ({f['severity']})" for r in rows for f in r.get("findings") or [])
    if flagged:  # an identity candidate is honest: every finding on one is the evaluator's false alarm
        lines.append("findings on identity candidates: " + ", ".join(f"{k} x{v}" for k, v in flagged.most_common()))
    eager = [r["speedup"].get("eager") for r in passed if r["speedup"].get("eager")]
    if eager:
        off = [abs(s - 1.0) for s in eager]
        lines.append(f"identity |speedup vs eager - 1|: median {statistics.median(off):.4f}, "
                     f"p90 {_quantile(off, 0.9):.4f}, max {max(off):.4f}; "
                     f"within 0.03: {sum(o <= 0.03 for o in off)} of {len(off)}")
        for timed in sorted({r.get("kernel_timed") or "on the CPU" for r in passed}):
            some = [abs(r["speedup"]["eager"] - 1.0) for r in passed
                    if (r.get("kernel_timed") or "on the CPU") == timed and r["speedup"].get("eager")]
            if some:
                lines.append(f"  timed {timed}: {len(some)} tasks, median {statistics.median(some):.4f}, "
                             f"max {max(some):.4f}, within 0.03: {sum(o <= 0.03 for o in some)}")
        paired = [abs(r["speedup"]["eager"] - 1.0) for r in passed if r.get("eager_paired") and r["speedup"].get("eager")]
        if paired:
            lines.append(f"  timed in alternation with eager: {len(paired)} tasks, median {statistics.median(paired):.4f}, "
                         f"max {max(paired):.4f}, within 0.03: {sum(o <= 0.03 for o in paired)}")
        intervals = [((r.get("speedup_interval") or {}).get("eager"), _interval_kind(r)) for r in passed]
        intervals = [(i, kind) for i, kind in intervals if i]
        if intervals:  # an honest identity's interval should hold 1: a tie with its own reference
            parts = []
            for kind in ("paired", "kept runs", "the machine's", "its own"):
                some = [i for i, k in intervals if k == kind]
                if some:
                    parts.append(f"{sum(lo <= 1.0 <= hi for lo, hi in some)} of {len(some)} with {kind} spread")
            lines.append(f"identity intervals holding 1: {sum(lo <= 1.0 <= hi for (lo, hi), _ in intervals)} "
                         f"of {len(intervals)} ({'; '.join(parts)})")
    warm = [w for r in rows for w in (r.get("host_warm") or {}).values() if w and w.get("iterations")]
    if warm:
        lines.append(f"host warm-ups: {len(warm)} timings warmed, {sum(bool(w.get('steady')) for w in warm)} "
                     f"steady; seconds median {statistics.median(w['seconds'] for w in warm):.2f}, "
                     f"max {max(w['seconds'] for w in warm):.2f}; first/last call "
                     f"{statistics.median(w['first_ms'] / w['last_ms'] for w in warm if w.get('last_ms')):.3f} (median)")
    if wall_s and evaluated:
        lines.append(f"this run: {evaluated} evaluations in {wall_s:.1f} s = {60 * evaluated / wall_s:.1f}/min")
    exclusive = [r["gpu_exclusive_s"] for r in rows if r.get("gpu_exclusive_s") is not None]
    durations = [r["duration_s"] for r in rows if r.get("duration_s")]
    if exclusive and durations:
        lines.append(f"GPU-exclusive s/eval: median {statistics.median(exclusive):.3f}, "
                     f"mean {statistics.fmean(exclusive):.3f}; evaluation s: median {statistics.median(durations):.2f}")
        held = [r["gpu_held_s"] or 0 for r in rows if r.get("gpu_held_s") is not None]
        waits = [r["gpu_wait_s"] or 0 for r in rows if r.get("gpu_wait_s") is not None]
        lines.append(f"where an evaluation's time goes (medians, s): held GPU {statistics.median(held):.2f}, "
                     f"waited for it {statistics.median(waits):.2f}, phases end at "
                     + ", ".join(f"{p} {statistics.median(v):.2f}" for p, v in _phase_lists(rows).items()))
        admitted = [(r["task"], float((r.get("memory") or {}).get("waited_s") or 0)) for r in rows
                    if (r.get("memory") or {}).get("admitted")]
        if admitted:  # a worker waiting for GPU memory runs nothing meanwhile
            waited = sorted(admitted, key=lambda tw: -tw[1])
            lines.append(f"waited for GPU memory (s/eval): median {statistics.median(w for _, w in admitted):.2f}, "
                         f"total {sum(w for _, w in admitted):.0f} over {len(admitted)} admitted; longest "
                         + ", ".join(f"{t} {w:.0f}" for t, w in waited[:4] if w >= 1))
        held = _memory_seconds(rows)
        if held:  # while an evaluation holds its announced bytes, the rest of the GPU is all others have
            total, usable = sum(h for _, h in held), _usable_bytes(rows)
            lines.append(f"GPU memory held: {total / 1e12:.2f} TB-s announced over {len(held)} evaluations"
                         + (f", a bound of {total / usable:.0f} s on any schedule of them on one GPU ({usable / 1e9:.0f} "
                            "GB admitted)" if usable else ""))
            alone = [r for r in rows if usable and 2 * float(((r.get("memory") or {}).get("announced") or {})
                                                             .get("total") or 0) > usable]
            holds = [steps for steps in map(_hold_steps, alone) if steps]
            if holds:  # none of these shares the GPU with another: their holds add up on any schedule
                spent: dict[str, float] = {}
                for steps in holds:
                    for step, seconds in steps.items():
                        spent[step] = spent.get(step, 0.0) + seconds
                each = [sum(steps.values()) for steps in holds]
                lines.append(f"announcing more than half of it (no two at once): {len(holds)} evaluations held "
                             f"theirs {sum(each):.0f} s in all, median {statistics.median(each):.1f} s, max "
                             f"{max(each):.1f} s; by the step that ended each stretch: "
                             + ", ".join(f"{k} {v:.0f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:8]))
        used = []  # each child's allocator peak (reserved: what neighbours could not have) against its announcement
        for r in rows:
            memory = r.get("memory") or {}
            peak, announced = memory.get("peak") or {}, memory.get("announced") or {}
            ref, cand = ((peak.get(who) or {}).get("reserved") or 0 for who in ("reference", "candidate"))
            if ref and announced.get("total"):
                used.append((r["task"], (ref + cand) / announced["total"],
                             ref / max(announced.get("reference") or 1, 1), cand / max(announced.get("candidate") or 1, 1)))
        if used:
            lines.append(f"GPU memory reserved at most / announced ({len(used)} evaluations): both "
                         f"median {statistics.median(u[1] for u in used):.2f}, max {max(u[1] for u in used):.2f}; "
                         f"reference median {statistics.median(u[2] for u in used):.2f}, max "
                         f"{max(u[2] for u in used):.2f}; candidate median {statistics.median(u[3] for u in used):.2f}, "
                         f"max {max(u[3] for u in used):.2f}; over: "
                         + (", ".join(f"{t} {b:.2f}" for t, b, _, _ in used if b > 1) or "none"))
        timer = [r["gpu_timer_wait_s"] for r in rows if r.get("gpu_timer_wait_s") is not None]
        stretch: dict[str, float] = {}
        for r in rows:
            for step, longest in (r.get("gpu_longest_stretch_s") or {}).items():
                stretch[step] = max(stretch.get(step, 0.0), longest)
        if timer:
            lines.append(f"waited as a timer (s/eval): median {statistics.median(timer):.2f}; longest stretches "
                         "between pause points, by the step that ended them: "
                         + ", ".join(f"{k} {v:.1f}" for k, v in sorted(stretch.items(), key=lambda kv: -kv[1])[:6]))
        drains = [d for r in rows for d in (r.get("drain_s") or {}).values() if d is not None]
        stops = [r.get("gpu_stops") or 0 for r in rows]
        if drains:
            lines.append("timings' wait for other processes' work to drain (s): "
                         f"median {statistics.median(drains):.4f}, "
                         f"p90 {_quantile(drains, 0.9):.4f}, max {max(drains):.3f}; children stopped for timers: "
                         f"{sum(stops)} times, {statistics.median([r.get('gpu_stopped_s') or 0 for r in rows]):.2f} "
                         "s per evaluation (median)")
        cpu = Counter()
        for r in rows:
            for who, s in (r.get("cpu_s") or {}).items():
                if who != "total":
                    cpu[who] += s
        if cpu:
            lines.append("CPU s/eval by who: " + ", ".join(f"{w} {s / len(rows):.2f}" for w, s in cpu.most_common()))
    plain = [r for r in passed if (r.get("plain") or {}).get("speedup") and r["speedup"].get("eager")]
    if plain:
        agree = [r["speedup"]["eager"] / r["plain"]["speedup"] for r in plain]
        lines.append(f"agreement with the plain method (speedup ratio): median {statistics.median(agree):.4f}, "
                     f"min {min(agree):.4f}, max {max(agree):.4f}; within 5%: "
                     f"{sum(abs(a - 1) <= 0.05 for a in agree)} of {len(agree)}")
    by_task: dict[str, list[float]] = {}
    for r in passed:
        if r["speedup"].get("eager"):
            by_task.setdefault(r["task"], []).append(r["speedup"]["eager"])
    repeated = {k: max(v) / min(v) for k, v in by_task.items() if len(v) > 1}
    if repeated:
        worst = sorted(repeated.items(), key=lambda kv: -kv[1])[:5]
        lines.append(f"repeats: max/min of a task's speedup over {len(repeated)} tasks: median "
                     f"{statistics.median(repeated.values()):.4f}, max {max(repeated.values()):.4f}; within 1.05: "
                     f"{sum(v <= 1.05 for v in repeated.values())}; worst " + ", ".join(f"{k} {v:.3f}" for k, v in worst))
    failed = [r for r in rows if r["status"] != "passed"]
    for r in failed[:40]:
        lines.append(f"  {r['task']} (repeat {r['repeat']}): {r['status']}: {r['message'][:160]}"
                     + (f" [bytes {r['bytes']}]" if r.get("bytes") else ""))
    return "\n".join(lines)


def _memory_seconds(rows: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """(task, bytes x seconds) each admitted evaluation held on its GPU's ledger: from its admission
    to the judge's start (the children closed, the bytes given back), from its timeline."""
    out = []
    for r in rows:
        memory = r.get("memory") or {}
        marks = {label: at for label, at in r.get("timeline") or []}
        if memory.get("admitted") and "gpu memory: admitted" in marks and "judge: begun" in marks:
            seconds = marks["judge: begun"] - marks["gpu memory: admitted"]
            out.append((r["task"], float((memory.get("announced") or {}).get("total") or 0) * seconds))
    return out


def _hold_steps(row: dict[str, Any]) -> dict[str, float]:
    """Where an admitted evaluation's hold of its GPU bytes went (admission to the judge's start):
    seconds by the timeline mark that ended each stretch, a mark's numbers left out so that its
    repeats add up; {} where the row was not admitted or has no such marks."""
    marks = [(re.sub(r"\s*\d+$", "", str(label)), float(at)) for label, at in row.get("timeline") or []]
    labels = [label for label, _ in marks]
    if not (row.get("memory") or {}).get("admitted") or "gpu memory: admitted" not in labels \
            or "judge: begun" not in labels:
        return {}
    start, end = labels.index("gpu memory: admitted"), labels.index("judge: begun")
    steps: dict[str, float] = {}
    for (_, before), (label, at) in zip(marks[start:end], marks[start + 1:end + 1]):
        steps[label] = steps.get(label, 0.0) + max(at - before, 0.0)
    return steps


def _usable_bytes(rows: list[dict[str, Any]]) -> float | None:
    """What the ledger admits on the GPU the rows ran on (its capacity less the margin), where a row says."""
    from gpu_workers.sandbox.gpumemory import DEFAULT_MARGIN

    sizes = [int(r["gpu_memory_bytes"]) for r in rows if r.get("gpu_memory_bytes")]
    return max(sizes) * (1 - DEFAULT_MARGIN) if sizes else None


def _phase_lists(rows: list[dict[str, Any]]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in rows:
        for phase, at in (r.get("phases_s") or {}).items():
            out.setdefault(phase, []).append(at)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(ROOT.parent / "shared" / "kernelbench"))
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--processes", type=int, default=1,
                        help="worker processes the pool spreads its workers over (LocalPool's processes)")
    parser.add_argument("--gpus", type=int, default=0, help="spread over this many GPUs (cuda)")
    parser.add_argument("--levels", type=int, nargs="*", default=None)
    parser.add_argument("--tasks", nargs="*", default=None, help="level1/19_ReLU, 19_ReLU or 1/19")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--max-elements", type=int, default=None, help="scale each task down (a CPU smoke)")
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--baselines", default="eager,compile", help="comma-separated (gpu_workers.schema.BASELINES)")
    parser.add_argument("--plain", action="store_true", help="also time each task the plain way")
    parser.add_argument("--plain-trials", type=int, default=100)
    parser.add_argument("--stop-after", type=float, default=None,
                        help="seconds: start no evaluation after this, finish those in flight (a time-boxed call)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--progress", default=None, help="the live log of every evaluation's phases")
    args = parser.parse_args(argv)
    progress = logging.FileHandler(args.progress or f"{args.out}.progress.log", encoding="utf-8")
    progress.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    live = logging.getLogger("gpu_workers.progress")
    live.addHandler(progress)
    live.setLevel(logging.DEBUG)

    from gpu_workers.schema import EvalRequest
    from gpu_workers.suite.kernelbench import identity_candidate, task_files

    tasks = task_files(Path(args.root), args.levels, args.tasks)
    if not tasks:
        print(f"no KernelBench tasks under {args.root} match", file=sys.stderr)
        return 2
    out = Path(args.out)
    done = _done(out)
    todo = [(t, k) for k in range(args.repeat) for t in tasks if (t.key, k) not in done]
    print(f"{len(tasks)} tasks x {args.repeat}: {len(todo)} to evaluate, {len(done)} already in {out}",
          file=sys.stderr)
    requests = []
    for task, _ in todo:
        source = task.path.read_text(encoding="utf-8")
        requests.append(EvalRequest(task_source=source, kernel_source=identity_candidate(source), device=args.device,
                                    track="open", task_name=task.key, trials=args.trials,
                                    timing_budget_s=args.timing_budget, max_elements=args.max_elements,
                                    baselines=tuple(b for b in args.baselines.split(",") if b)))
    began = time.monotonic()
    try:
        evaluated = _sweep(args, requests, todo, out, began)
    finally:
        live.removeHandler(progress)
        progress.close()
    wall = time.monotonic() - began
    print(summarize(_rows(out), wall, evaluated))
    return 0


def _sweep(args: argparse.Namespace, requests: list[Any], todo: list[Any], out: Path, began: float) -> int:
    """Evaluate through the pool, a row each as it completes; past ``--stop-after`` nothing new
    starts and the evaluations in flight finish (their rows kept for the next call to resume from).
    Returns how many were evaluated."""
    import concurrent.futures as cf

    from gpu_workers.workers.pool import LocalPool

    evaluated = 0
    with LocalPool(workers=args.workers, gpus=args.gpus, processes=args.processes) as pool, \
            out.open("a", encoding="utf-8") as sink:
        futures = {pool.submit(r): i for i, r in enumerate(requests)}
        pending = set(futures)
        stopping = False
        while pending:
            left = None if args.stop_after is None or stopping else max(0.0, began + args.stop_after - time.monotonic())
            finished, pending = cf.wait(pending, timeout=left, return_when=cf.FIRST_COMPLETED)
            if not finished and not stopping:  # past the time given: let what runs finish, start nothing
                stopping = True
                cancelled = sum(f.cancel() for f in pending)
                pending = {f for f in pending if not f.cancelled()}
                print(f"stopping after {args.stop_after:g} s: {cancelled} not started, {len(pending)} in flight",
                      file=sys.stderr)
                continue
            for future in finished:
                index, result = futures[future], future.result()
                evaluated += 1
                _write(args, requests, todo, index, result, sink, began)
    return evaluated


def _write(args: argparse.Namespace, requests: list[Any], todo: list[Any], index: int, result: Any, sink: Any,
           began: float) -> None:
    task, repeat = todo[index]
    row = row_for(task.key, repeat, result, time.monotonic() - began)
    if args.plain and result.status == "passed":
        row["plain"] = _plain(task.path, requests[index].kernel_source, args.device, args.max_elements,
                              args.plain_trials)
    sink.write(json.dumps(row) + "\n")
    sink.flush()
    print(f"{task.key} #{repeat}: {result.status} {result.speedup.get('eager')}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
