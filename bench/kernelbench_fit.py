"""Which KernelBench tasks fit one GPU as the evaluator admits them, measured without a GPU: each
task's inputs, outputs and parameters on the meta device (the evaluator's own sizing child), then the
bytes the evaluation announces to its GPU's ledger (``tasks/budget.announced_bytes``), whether its
outputs are compared on the device, and whether the float64 reference fits beside the candidate.

    python bench/kernelbench_fit.py --root ../shared/kernelbench --capacity 150109880320 --out fit.jsonl

``--capacity`` is the GPU's memory in bytes (default: an H200's, 150,109,880,320 as torch reports it);
the ledger admits up to 90% of it. Prints one line per task that does not fit, then a summary.
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
    args = parser.parse_args(argv)

    from gpu_workers import EvalRequest
    from gpu_workers.build.compile import PhaseFailure
    from gpu_workers.hardware import hardware_info
    from gpu_workers.pipeline.plan import compares_on_device, kept_rotations
    from gpu_workers.sandbox.gpumemory import GpuLedger
    from gpu_workers.settings import current
    from gpu_workers.suite.kernelbench import identity_candidate, task_files
    from gpu_workers.tasks import budget

    settings = current()
    cpu = hardware_info("cpu")  # the sizing runs on the meta device, the GPU hidden: any host will do
    usable = GpuLedger("fit", args.capacity, Path(tempfile.mkdtemp(prefix="kc-fit-"))).usable
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
