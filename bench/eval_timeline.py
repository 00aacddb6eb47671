"""Where one evaluation's time goes: the timeline of phases and child messages, for suite tasks.

    python bench/eval_timeline.py --device cuda --only gelu softmax --repeat 2 [--baselines eager]

With ``--repeat 5`` it also prints timing fidelity (max/min of the kernel medians of separate
evaluations); ``--out`` writes the medians in the form ``bench/ncu_agreement.py`` reads.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--baselines", default="eager")
    parser.add_argument("--timing-budget", type=float, default=0.5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from gpu_workers import EvalRequest, evaluate
    from gpu_workers.hardware import placement
    from gpu_workers.suite import list_tasks

    rows = []
    for task in list_tasks():
        if args.only and task.name not in args.only:
            continue
        medians, gpu_medians, e2e_medians, net_medians = [], [], [], []
        for attempt in range(args.repeat):
            result = evaluate(EvalRequest(task_source=task.task_source, kernel_source=task.kernel_source(args.device),
                                          device=args.device, baselines=tuple(args.baselines.split(",")),
                                          timing_budget_s=args.timing_budget, task_name=task.name))
            steps, last = [], 0.0
            for label, at in result.timing_stats.get("timeline", []):
                steps.append(f"{label} +{at - last:.2f}")
                last = at
            print(f"{task.name} #{attempt + 1}: {result.status} in {result.duration_s} s; kernel "
                  f"{result.timings_ms.get('kernel')} ms; " + " | ".join(steps), flush=True)
            if result.status != "passed":
                print(f"  {result.message[:500]}", flush=True)
            elif result.timings_ms.get("kernel"):
                medians.append(result.timings_ms["kernel"])
                stats = result.timing_stats.get("kernel") or {}
                if stats.get("gpu_median_ms"):
                    gpu_medians.append(stats["gpu_median_ms"])
                if stats.get("e2e_median_ms"):
                    e2e_medians.append(stats["e2e_median_ms"])
                    net_medians.append(stats["net_median_ms"])
                print(f"  the reward's {stats.get('median_ms')} ms ({stats.get('timed')}); kernel side "
                      f"{stats.get('gpu_median_ms')} ms; host {stats.get('host_median_ms')} ms per call; end to end "
                      f"{stats.get('e2e_median_ms')} ms (an empty iteration {stats.get('round_trip_ms')} ms, net "
                      f"{stats.get('net_median_ms')} ms); {stats.get('iterations')} iterations; "
                      f"host CPUs {stats.get('host_cpus')} ({placement(result)})", flush=True)
        if medians:
            row = {"task": task.name, "kernel_ms": statistics.median(medians), "medians_ms": medians}
            if len(gpu_medians) == len(medians):
                row.update(gpu_kernel_ms=statistics.median(gpu_medians), gpu_medians_ms=gpu_medians)
            rows.append(row)
            if args.out:  # after every task: a run cut off by its time box still leaves what it measured
                Path(args.out).write_text(json.dumps({"rows": rows}, indent=2))
            if len(e2e_medians) == len(medians):
                row.update(e2e_medians_ms=e2e_medians, net_medians_ms=net_medians)
            for label, values in (("the reward's", medians), ("kernel side", gpu_medians), ("end to end", e2e_medians),
                                  ("end to end, net of an empty iteration", net_medians)):
                if len(values) > 1:
                    print(f"timing fidelity on {task.name}, {label}: {len(values)} evaluations, medians "
                          f"{[round(m, 5) for m in values]} ms, max/min {max(values) / min(values):.4f}", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
