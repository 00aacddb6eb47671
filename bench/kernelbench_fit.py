"""Which KernelBench tasks fit one GPU as the evaluator admits them, measured without a GPU: each
task's inputs, outputs and parameters on the meta device (the evaluator's own sizing child), then the
bytes the evaluation announces to its GPU's ledger (``tasks/budget.announced_bytes``), whether its
outputs are compared on the device, and whether the float64 reference fits beside the candidate.

    python bench/kernelbench_fit.py --root ../shared/kernelbench --capacity 150109880320 --out fit.jsonl

``--capacity`` is the GPU's memory in bytes (default: an H200's, 150,109,880,320 as torch reports it);
the ledger admits up to 90% of it. Prints one line per task that does not fit, then a summary, with
what the announcements put on any schedule of the tasks on one GPU (``schedule_bound``): the sweep's
time is at least the announced bytes times the seconds each evaluation holds them, over what the GPU
admits, and tasks announcing more than half of it run one at a time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

H200_BYTES = 150_109_880_320


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(ROOT.parent / "shared" / "kernelbench"))
    parser.add_argument("--levels", type=int, nargs="*", default=None)
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--capacity", type=int, default=H200_BYTES, help="the GPU's memory in bytes")
    parser.add_argument("--out", default=None, help="one JSON line per task")
    parser.add_argument("--rows", default=None,
                        help="summarise an earlier run's --out rather than measure again (its announcements are "
                             "those for the capacity it measured with; what fits is judged on this one)")
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="the sweep time to set against the schedule bound (issue 20's goal: 20)")
    args = parser.parse_args(argv)
    from gpu_workers.sandbox.gpumemory import GpuLedger

    usable = GpuLedger("fit", args.capacity, Path(tempfile.mkdtemp(prefix="kc-fit-"))).usable
    if args.rows:
        rows = [json.loads(line) for line in Path(args.rows).read_text().splitlines() if line.strip()]
        for r in rows:  # the capacity asked for now, not the earlier run's
            r["fits"] = bool(r.get("sized")) and r["announced"]["total"] <= usable
    else:
        rows = measure(args, usable)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in rows:
        if not r["sized"]:
            print(f"  {r['task']}: not measured on the meta device ({r['error'][:120]})")
        elif not r["fits"]:
            print(f"  {r['task']}: announces {r['announced']['total']:,} bytes (inputs "
                  f"{r['bytes']['input_bytes']:,}, outputs {r['bytes']['output_bytes']:,}, parameters "
                  f"{r['bytes']['parameter_bytes']:,}): more than the {usable:,} the GPU admits")
    sized = [r for r in rows if r["sized"]]
    print(f"tasks: {len(rows)}; measured: {len(sized)}; fit: {sum(r['fits'] for r in sized)}; "
          f"outputs compared on the device: {sum(r['on_device'] for r in sized)}; "
          f"float64 reference: {sum(r['announced']['fp64'] for r in sized if r['fits'])} of those that fit")
    big = Counter("> 64 GB" if r["announced"]["total"] > 64e9 else "> 16 GB" if r["announced"]["total"] > 16e9
                  else "<= 16 GB" for r in sized)
    print("announced: " + ", ".join(f"{k}: {v}" for k, v in sorted(big.items())))
    bound = schedule_bound(sized, usable)
    if bound["gpus"]:
        seconds = 60 * args.minutes
        print(f"on one GPU: the announcements add up to {bound['gpus']:.1f} times what it admits, so any schedule "
              f"takes at least {bound['gpus']:.1f} x the byte-weighted mean seconds an evaluation holds its bytes "
              f"(admission to the judge's start): within {args.minutes:g} min that mean is at most "
              f"{seconds / bound['gpus']:.1f} s")
    if bound["alone"]:
        print(f"{bound['alone']} tasks announce more than half of what it admits ({bound['alone_gpus']:.1f} of the "
              f"{bound['gpus']:.1f}), so no two of them run at once: within {args.minutes:g} min they hold their "
              f"bytes {60 * args.minutes / bound['alone']:.1f} s each at most, on average")
    return 0


def measure(args: argparse.Namespace, usable: int) -> list[dict]:
    """Each task's sizes on the meta device and what its evaluation announces on a GPU of ``args.capacity``."""
    from gpu_workers import EvalRequest
    from gpu_workers.build.compile import PhaseFailure
    from gpu_workers.hardware import hardware_info
    from gpu_workers.pipeline.plan import compares_on_device, kept_rotations
    from gpu_workers.settings import current
    from gpu_workers.suite.kernelbench import identity_candidate, task_files
    from gpu_workers.tasks import budget

    settings = current()
    cpu = hardware_info("cpu")  # the sizing runs on the meta device, the GPU hidden: any host will do
    rows = []
    for task in task_files(Path(args.root), args.levels, args.tasks):
        source = task.path.read_text()
        request = EvalRequest(task_source=source, kernel_source=identity_candidate(source), device="cuda",
                              track="open", task_name=task.key)
        try:
            sizing = budget.task_sizing(request, cpu, None)
        except PhaseFailure as exc:
            rows.append({"task": task.key, "sized": False, "error": exc.message[:300]})
            continue
        if not sizing.get("bytes"):
            rows.append({"task": task.key, "sized": False, "error": str(sizing.get("error", ""))[:300]})
            continue
        on_device = compares_on_device(request, sizing, settings)
        kept = len(kept_rotations("cuda", on_device))
        hardware = {"device": "cuda", "memory_bytes": args.capacity, "name": "fit", "gpu": {"uuid": "fit"}}
        announced = budget.announced_bytes(request, sizing, kept, hardware, on_device)
        rows.append({"task": task.key, "sized": True, "bytes": sizing["bytes"], "on_device": on_device,
                     "announced": announced, "fits": announced["total"] <= usable})
    return rows


def schedule_bound(rows: list[dict], usable: int) -> dict[str, float | int]:
    """What the fitting tasks' announcements put on any schedule of them on one GPU that admits
    ``usable`` bytes: ``gpus``, their sum over ``usable`` (the sweep's time is at least that times
    the byte-weighted mean seconds each holds its bytes), and ``alone``, how many announce more than
    half of ``usable`` (no two of those are admitted at once, so their holding times add up), with
    ``alone_gpus`` their part of ``gpus``."""
    held = [int(r["announced"]["total"]) for r in rows if r.get("fits")]
    alone = [b for b in held if 2 * b > usable]
    return {"gpus": sum(held) / usable, "alone": len(alone), "alone_gpus": sum(alone) / usable}


if __name__ == "__main__":
    raise SystemExit(main())
