"""Our kernel times against Nsight Compute's ``gpu__time_duration`` on the suite's CUDA kernels.

Reads the evaluator's medians from a ``bench/suite_gpu.py --out`` JSON, then runs each task's
reference kernel under ``ncu --clock-control none --profile-from-start off``: three forward passes
outside the profiled range, then ``--passes`` inside it. ncu's per-launch durations, summed per
forward, are compared with our median (which also holds launch gaps and any torch glue around the
kernel, so short multi-launch forwards read a little slower in ours).

    python bench/suite_gpu.py --device cuda --out suite.json
    python bench/ncu_agreement.py --suite-json suite.json [--only gelu softmax]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUNNER = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from gpu_workers.build import inline as fastbuild
from gpu_workers.tasks import apply_profile, exec_source
fastbuild.install()  # the evaluator's own build of this kernel (same sources, same folder): no rebuild
task = exec_source(open(sys.argv[2]).read(), "task", "<task>")
apply_profile(task, "cuda")
kernel = exec_source(open(sys.argv[3]).read(), "kernel", "<kernel>")
passes = int(sys.argv[4])
torch.manual_seed(0)
model = kernel.ModelNew(*task.get_init_inputs()).cuda().eval()
inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
with torch.no_grad():
    for _ in range(3):
        model(*inputs)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _ in range(passes):
        model(*inputs)
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
"""

_UNIT_TO_MS = {"ns": 1e-6, "nsecond": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
               "second": 1e3, "s": 1e3}


def ncu_ms_per_forward(ncu: str, task, passes: int, env: dict[str, str], work: Path) -> tuple[float, int]:
    runner = work / "runner.py"
    runner.write_text(RUNNER)
    (work / "task.py").write_text(task.task_source)
    (work / "kernel.py").write_text(task.cuda_kernel_source)
    done = subprocess.run(
        [ncu, "--clock-control", "none", "--profile-from-start", "off", "--metrics", "gpu__time_duration.sum",
         "--csv", sys.executable, str(runner), str(ROOT), str(work / "task.py"), str(work / "kernel.py"),
         str(passes)], capture_output=True, text=True, timeout=600, env=env, check=False)
    text = done.stdout
    start = text.find('"ID"')
    if done.returncode != 0 or start == -1:
        raise RuntimeError(f"ncu failed ({done.returncode}): {(done.stderr or done.stdout)[-1500:]}")
    total, launches = 0.0, 0
    for row in csv.DictReader(io.StringIO(text[start:])):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            total += float(row["Metric Value"].replace(",", "")) * _UNIT_TO_MS.get(row.get("Metric Unit", "ns"), 1e-6)
            launches += 1
    if launches == 0:
        raise RuntimeError("ncu profiled no kernel launch")
    return total / passes, launches // passes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite-json", required=True)
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    from gpu_workers.build.compile import build_context, child_env
    from gpu_workers.hardware import hardware_info
    from gpu_workers.schema import EvalRequest
    from gpu_workers.suite import list_tasks

    ncu = shutil.which("ncu") or next((str(p) for p in Path("/opt/nvidia").glob("nsight-compute/*/ncu")), None)
    if not ncu:
        print("ncu not found")
        return 2
    ours = {row["task"]: row for row in json.loads(Path(args.suite_json).read_text())["rows"]}
    hardware = hardware_info("cuda")
    rows = []
    for task in list_tasks():
        if (args.only and task.name not in args.only) or not (ours.get(task.name) or {}).get("kernel_ms"):
            continue
        request = EvalRequest(task_source=task.task_source, kernel_source=task.cuda_kernel_source, device="cuda")
        env = {**os.environ, **child_env(request, hardware, build_context(request, hardware), hide_gpu=False)}
        with tempfile.TemporaryDirectory(prefix="ka-ncu-") as work:
            try:
                ncu_ms, launches = ncu_ms_per_forward(ncu, task, args.passes, env, Path(work))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"{task.name}: {exc}", flush=True)
                continue
        # the kernel-side median when the evaluator gave one (what ncu measures); else end to end
        our_ms = float(ours[task.name].get("gpu_kernel_ms") or ours[task.name]["kernel_ms"])
        ratio = our_ms / ncu_ms
        rows.append({"task": task.name, "ours_ms": our_ms, "ncu_ms": ncu_ms, "launches": launches, "ratio": ratio})
        print(f"{task.name}: ours {our_ms:.4f} ms, ncu {ncu_ms:.4f} ms over {launches} launch(es): "
              f"ratio {ratio:.3f}", flush=True)
    if not rows:
        return 1
    within = [r for r in rows if abs(r["ratio"] - 1) <= args.tolerance]
    print(f"within {args.tolerance:.0%} of ncu: {len(within)}/{len(rows)}; median ratio "
          f"{statistics.median(r['ratio'] for r in rows):.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
