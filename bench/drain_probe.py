"""Can a timer tell, from its own CUDA context, that the GPU has no other process's work left?

A timing needs the GPU to itself. Stopping the other evaluations' children (SIGSTOP) keeps them from
launching more, but what they queued before the stop still runs. Without MPS the GPU time-slices
between contexts, so a tiny kernel launched by the timer waits for the other context's slice while
that context has work, and returns at once when none does. This script measures that on the device:

  idle        the round trip of an empty kernel (launch + synchronise) with nothing else on the GPU
  busy        the same while another process keeps the GPU busy with matrix products
  stopped     another process queues a known amount of work, is stopped at once (SIGSTOP), and the
              probe runs until its round trips are idle-like again: when that happens against when
              the queued work ends (measured alone beforehand)
  long        the same with one long kernel (a 1 s spin) queued instead of many short ones

    python bench/drain_probe.py [--out drain.json]

It prints each case's round trips (median, p90, max) and, for the stopped cases, the drain the probe
saw against the queued work's own time: the ratio is what a timer's wait costs, and a drain seen
before the work ends would mean the probe cannot be trusted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

_WORKER = r"""
import sys, time, torch
mode, n = sys.argv[1], int(sys.argv[2])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize()
def queue():
    if mode == "long":
        torch.cuda._sleep(n)
    else:
        for _ in range(n): a @ b
if mode == "measure" or mode == "measure-long":
    mode = "long" if mode == "measure-long" else "mm"
    t = time.perf_counter(); queue(); torch.cuda.synchronize()
    print(time.perf_counter() - t, flush=True); sys.exit(0)
if mode == "busy":
    print("ready", flush=True)
    while True:
        for _ in range(20): a @ b
        torch.cuda.synchronize()
t = time.perf_counter(); queue()
print("queued", time.perf_counter() - t, flush=True)
torch.cuda.synchronize()
print("done", flush=True)
"""


def probe(n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        torch.cuda._sleep(0)
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e6)
    return times


def stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_us": round(statistics.median(ordered), 1),
            "p90_us": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
            "max_us": round(ordered[-1], 1), "n": len(ordered)}


def worker(mode: str, n: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _WORKER, mode, str(n)], stdout=subprocess.PIPE, text=True)


def drained(threshold_us: float, run: int = 8, bound_s: float = 30.0) -> tuple[float, list[float]]:
    """Probe until ``run`` round trips in a row are under the threshold; seconds taken and the trips."""
    start, seen, streak = time.perf_counter(), [], 0
    while time.perf_counter() - start < bound_s:
        trip = probe(1)[0]
        seen.append(trip)
        streak = streak + 1 if trip < threshold_us else 0
        if streak >= run:
            break
    return time.perf_counter() - start, seen


def nvml_busy_pids() -> dict[str, object]:
    """Which processes NVML saw on the GPU's SMs in the last second (``gpuactivity``, as a parent
    without CUDA asks): can it tell whose queued work holds a timer back?"""
    from gpu_workers.sandbox import gpuactivity

    return {"samples": gpuactivity.process_samples({"gpu": {}}), "me": os.getpid()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "drain_probe.json"))
    args = parser.parse_args()
    torch.cuda.init()
    probe(50)
    report: dict[str, object] = {"device": torch.cuda.get_device_name(0)}
    idle = probe(500)
    report["idle"] = stats(idle)
    threshold = max(4 * statistics.median(idle), 100.0)
    report["threshold_us"] = threshold

    busy = worker("busy", 0)
    assert busy.stdout.readline().strip() == "ready"
    report["busy"] = stats(probe(300))
    busy.kill()
    busy.wait()
    probe(50)

    for name, mode, n in (("stopped", "mm", 1500), ("long", "long", 2_000_000_000)):
        measured = worker("measure-long" if mode == "long" else "measure", n)
        work_s = float(measured.stdout.readline())
        measured.wait()
        proc = worker(mode, n)
        word, queueing = proc.stdout.readline().split()
        os.kill(proc.pid, signal.SIGSTOP)
        assert word == "queued"
        t0 = time.perf_counter()
        time.sleep(0.2)
        report[f"{name}_nvml"] = {**nvml_busy_pids(), "stopped": proc.pid}  # its queued work runs on
        took, trips = drained(threshold)
        os.kill(proc.pid, signal.SIGCONT)
        done = proc.stdout.readline().strip()
        proc.wait()
        report[name] = {"queued_work_s": round(work_s, 4), "queueing_s": round(float(queueing), 4),
                        "drain_seen_s": round(took, 4),
                        "after_stop_s": round(time.perf_counter() - t0, 4),
                        "trips_first": [round(x, 1) for x in trips[:10]], "trips": stats(trips),
                        "worker_finished": done == "done"}
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
