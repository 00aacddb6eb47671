"""The plain method, as KernelBench times: CUDA events around each call on the current stream, a few
warm-up calls, fixed inputs, a 256 MB L2 flush between calls; the median (and mean) of the calls.
On the CPU, ``perf_counter`` around each call. Run in a process of its own (it executes the task's
and the candidate's code), holding the GPU's slot exclusive so no evaluation's work overlaps it:

    python bench/plain_timing.py TASK.py KERNEL.py --device cuda [--max-elements N] [--trials 100]

Prints one JSON object: ``{"reference": {...}, "candidate": {...}, "speedup": ...}`` with each
side's median, mean, interquartile range and sample count (milliseconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLUSH_BYTES = 256 << 20


def summary(times: list[float]) -> dict[str, float | int]:
    q = statistics.quantiles(times, n=4) if len(times) >= 4 else [min(times), statistics.median(times), max(times)]
    return {"median_ms": statistics.median(times), "mean_ms": statistics.fmean(times), "q1_ms": q[0],
            "q3_ms": q[2], "min_ms": min(times), "samples": len(times)}


def time_plain(fn, inputs: list, device: str, trials: int, warmups: int) -> list[float]:
    import torch

    with torch.no_grad():
        for _ in range(warmups):
            fn(*inputs)
        if device == "cpu":
            times = []
            for _ in range(trials):
                began = time.perf_counter()
                fn(*inputs)
                times.append((time.perf_counter() - began) * 1e3)
            return times
        flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device=device)
        torch.cuda.synchronize()
        times = []
        for _ in range(trials):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return times


def plain_speedup(task_source: str, kernel_source: str, device: str, trials: int = 100, warmups: int = 5,
                  max_elements: int | None = None, seed: int = 42) -> dict:
    import torch

    from gpu_workers.child.size import apply_constants, constant_names, shrink, size_constants
    from gpu_workers.tasks import exec_source, load_task_module

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    task = load_task_module(task_source, None)
    changed: dict[str, int] = {}
    if max_elements:
        changed, _ = shrink(task, size_constants(task, constant_names(task_source)), max_elements)
        apply_constants(task, changed)
    candidate = exec_source(kernel_source, "kernelcourt_candidate", "<kernel>")
    apply_constants(candidate, changed)
    if device == "cuda":
        torch.cuda.set_device(0)
    torch.manual_seed(seed)
    init = task.get_init_inputs()
    torch.manual_seed(seed)
    reference = task.Model(*init).to(device).eval()
    torch.manual_seed(seed)
    model = candidate.ModelNew(*init).to(device).eval()
    torch.manual_seed(seed)
    with torch.device(device):
        inputs = list(task.get_inputs())
    out = {}
    for name, fn in (("reference", reference), ("candidate", model)):  # KernelBench times them apart
        out[name] = summary(time_plain(fn, inputs, device, trials, warmups))
    out["speedup"] = out["reference"]["median_ms"] / out["candidate"]["median_ms"]
    out["constants"] = changed
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task")
    parser.add_argument("kernel")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--warmups", type=int, default=5)
    parser.add_argument("--max-elements", type=int, default=None)
    args = parser.parse_args()
    from contextlib import nullcontext

    from gpu_workers.hardware import hardware_info
    from gpu_workers.sandbox.gpuslot import gpu_slot

    hardware = hardware_info(args.device, 0 if args.device == "cuda" else None)
    with gpu_slot(hardware, mode="exclusive") if args.device == "cuda" else nullcontext():
        result = plain_speedup(Path(args.task).read_text(), Path(args.kernel).read_text(), args.device,
                               args.trials, args.warmups, args.max_elements)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
