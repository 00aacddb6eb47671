"""Our suite on one device: each task's eager, torch.compile and reference-kernel times and speedups,
plus timing fidelity (the same kernel measured in separate runs).

Builds every kernel first in a CPU pool (compile phase only), then evaluates the tasks one at a time
so that no compile competes with a measurement.

    python bench/suite_gpu.py --device cuda --out results.json --markdown table.md
    python bench/suite_gpu.py --device cpu --only relu softmax
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--build-workers", type=int, default=8)
    parser.add_argument("--baselines", default="eager,compile")
    parser.add_argument("--timing-budget", type=float, default=2.0)
    parser.add_argument("--fidelity-runs", type=int, default=5)
    parser.add_argument("--fidelity-task", default=None, help="task measured repeatedly (default: the first)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--markdown", default=None)
    args = parser.parse_args()

    from gpu_workers import EvalRequest, evaluate
    from gpu_workers.build.compile import build_context, compile_candidate
    from gpu_workers.hardware import hardware_info
    from gpu_workers.suite import list_tasks

    tasks = [t for t in list_tasks() if not args.only or t.name in args.only]
    hardware = hardware_info(args.device)
    print(f"{len(tasks)} tasks on {hardware['key']}", flush=True)

    def request(task) -> EvalRequest:
        kernel = task.cuda_kernel_source if args.device == "cuda" else task.cpu_kernel_source
        return EvalRequest(task_source=task.task_source, kernel_source=kernel, device=args.device,
                           task_name=task.name, baselines=tuple(args.baselines.split(",")),
                           timing_budget_s=args.timing_budget)

    started = time.perf_counter()

    def build(task):
        req = request(task)
        t0 = time.perf_counter()
        try:
            outcome = compile_candidate(req, hardware, build_context(req, hardware))
            return task.name, time.perf_counter() - t0, "deferred" if outcome.deferred else "ok"
        except Exception as exc:  # noqa: BLE001 - reported in the table
            return task.name, time.perf_counter() - t0, f"failed: {str(exc)[:200]}"

    with ThreadPoolExecutor(max_workers=args.build_workers) as pool:
        builds = {name: (secs, state) for name, secs, state in pool.map(build, tasks)}
    print(f"built {len(tasks)} kernels in {time.perf_counter() - started:.1f} s with {args.build_workers} workers",
          flush=True)

    rows = []
    for task in tasks:
        result = evaluate(request(task))
        row = {"task": task.name, "level": task.level, "status": result.status, "correct": result.correct,
               "eager_ms": result.timings_ms.get("eager"), "compile_ms": result.timings_ms.get("compile"),
               "kernel_ms": result.timings_ms.get("kernel"), "speedup_eager": result.speedup.get("eager"),
               "speedup_compile": result.speedup.get("compile"), "build_s": builds[task.name][0],
               "build": builds[task.name][1], "findings": [f.to_dict() for f in result.findings],
               "message": result.message, "max_rel_error": result.max_rel_error,
               "spread": (result.timing_stats.get("kernel") or {}).get("spread")}
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("task", "status", "eager_ms", "compile_ms", "kernel_ms",
                                               "speedup_eager", "speedup_compile")}), flush=True)
        if result.status != "passed":
            print(f"  message: {result.message}\n  log: {result.run_log[-1500:]}{result.compile_log[-1500:]}",
                  flush=True)

    fidelity = None
    if args.fidelity_runs > 1 and tasks:
        task = next((t for t in tasks if t.name == args.fidelity_task), tasks[0])
        medians = []
        for _ in range(args.fidelity_runs):
            r = evaluate(request(task))
            if r.timings_ms.get("kernel"):
                medians.append(r.timings_ms["kernel"])
        if medians:
            fidelity = {"task": task.name, "medians_ms": medians, "max_over_min": max(medians) / min(medians)}
            print(f"timing fidelity on {task.name}: medians {[f'{m:.4f}' for m in medians]} ms, "
                  f"max/min {fidelity['max_over_min']:.4f}", flush=True)

    if args.out:
        Path(args.out).write_text(json.dumps({"hardware": hardware, "rows": rows, "fidelity": fidelity}, indent=2))
    lines = ["| task | level | status | eager ms | compile ms | kernel ms | vs eager | vs compile |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def fmt(v, spec=".4g"):
        return "—" if v is None else format(v, spec)

    for row in rows:
        lines.append(f"| {row['task']} | {row['level']} | {row['status']} | {fmt(row['eager_ms'])} | "
                     f"{fmt(row['compile_ms'])} | {fmt(row['kernel_ms'])} | {fmt(row['speedup_eager'], '.2f')} | "
                     f"{fmt(row['speedup_compile'], '.2f')} |")
    passed = [r for r in rows if r["status"] == "passed" and r["speedup_eager"]]
    if passed:
        geo = statistics.geometric_mean([r["speedup_eager"] for r in passed])
        lines.append(f"\n{len(passed)}/{len(rows)} passed; geometric-mean speedup vs eager {geo:.2f}")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
