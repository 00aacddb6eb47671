"""Does another process making or ending a CUDA context disturb a kernel timed meanwhile?

The GPU slot (gpu_workers/sandbox/gpuslot.py) keeps other evaluations' GPU work away from a timing. A
candidate child's context is made (its warm-up) and destroyed (its exit) by the driver: if that
disturbs a timing, both must hold the GPU shared, and a waiting timer waits for them (on a busy
16-core node, a context takes over a second to make). This measures it, in one run:

- the kernel-side time (CUDA events) of a small and a memory-bound kernel, iterations each
  synchronised as the evaluator's timing loop does, for some seconds per condition;
- alone; with idle contexts of other processes present (as a busy node always has: kept reference
  children, candidates waiting for their turn); with those, while neighbour processes (torch
  imported) start and exit *without* touching CUDA (the CPU load alone); and while they make a
  context, allocate, and exit (the same CPU load, plus making and ending contexts);
- it prints each condition's median, 90th and 99th percentile and the ratio of the context churn
  to the CPU-only churn, and ends with ``context churn vs CPU churn, median: N.NNNx``.

    python bench/context_interference.py --seconds 8 --neighbours 6
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time

NEIGHBOUR = r"""
import os, sys
import torch
sys.stdout.write("ready\n"); sys.stdout.flush()
what = sys.stdin.readline().strip()
if what in ("context", "stay"):
    x = torch.empty(1 << 20, device="cuda")  # a context and an allocation, as a candidate's warm-up makes
    torch.cuda.synchronize()
if what == "stay":  # an idle context, as a kept reference child's or a candidate's waiting for its turn
    sys.stdout.write("made\n"); sys.stdout.flush()
    sys.stdin.readline()
os._exit(0)  # as a candidate child ends: the driver tears the context down
"""


class Churn:
    """``count`` neighbours in turn, each: start (torch imported), then make a context or not, and exit;
    as each ends, the next starts."""

    def __init__(self, what: str, count: int):
        self.what, self.count = what, count
        self.done = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._cycle, daemon=True) for _ in range(count)]

    def _cycle(self) -> None:
        while not self._stop.is_set():
            proc = subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, text=True)
            proc.stdout.readline()  # torch imported
            proc.stdin.write(self.what + "\n")
            proc.stdin.flush()
            proc.wait()
            self.done += 1

    def __enter__(self) -> Churn:
        for thread in self._threads:
            thread.start()
        time.sleep(4.0)  # the first neighbours imported torch and are making their contexts
        self.done = 0
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()


class Residents:
    """``count`` neighbours that make a context and keep it, idle, until the end."""

    def __init__(self, count: int):
        self.procs = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True) for _ in range(count)]

    def __enter__(self) -> Residents:
        for proc in self.procs:
            proc.stdout.readline()
            proc.stdin.write("stay\n")
            proc.stdin.flush()
        for proc in self.procs:
            proc.stdout.readline()  # its context made
        return self

    def __exit__(self, *exc) -> None:
        for proc in self.procs:
            proc.stdin.close()
            proc.wait()


def time_kernels(kernels: dict, seconds: float) -> dict[str, list[float]]:
    """Each kernel's event-timed iterations (each synchronised), in turns of 100, for ``seconds``."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out: dict[str, list[float]] = {name: [] for name in kernels}
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for name, fn in kernels.items():
            for _ in range(100):
                start.record()
                fn()
                end.record()
                end.synchronize()
                out[name].append(start.elapsed_time(end))
    return out


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median_ms": statistics.median(ordered), "p90_ms": ordered[int(0.9 * len(ordered))],
            "p99_ms": ordered[int(0.99 * len(ordered))], "max_ms": ordered[-1]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="timing per condition")
    parser.add_argument("--neighbours", type=int, default=6, help="neighbours starting and ending at once")
    parser.add_argument("--residents", type=int, default=8, help="idle contexts kept throughout the churn")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("needs a CUDA GPU", file=sys.stderr)
        return 2
    small = torch.randn(1 << 20, device="cuda")
    large = torch.randn(1 << 26, device="cuda")
    kernels = {"neg 1M": lambda: torch.neg(small), "add 64M": lambda: torch.add(large, 1.0)}
    time_kernels(kernels, 1.0)
    results: dict[str, dict[str, dict[str, float]]] = {}

    def condition(label: str, churn: str | None) -> None:
        finished = 0
        if churn:
            with Churn(churn, args.neighbours) as running:
                samples = time_kernels(kernels, args.seconds)
                finished = running.done
        else:
            samples = time_kernels(kernels, args.seconds)
        results[label] = {name: summary(values) for name, values in samples.items()}
        for name, s in results[label].items():
            print(f"{label:34s} {name:8s} median {s['median_ms'] * 1e3:8.2f} us  p90 {s['p90_ms'] * 1e3:8.2f} us  "
                  f"p99 {s['p99_ms'] * 1e3:8.2f} us  max {s['max_ms'] * 1e3:9.2f} us  ({len(samples[name])} timed"
                  + (f"; {finished} neighbours ended meanwhile)" if churn else ")"), flush=True)

    condition("alone", None)
    # As on a busy node: other evaluations' contexts exist, idle, all the time; then neighbours start
    # and end without CUDA (the CPU load alone), then making and ending contexts (that load and the
    # contexts' own work).
    with Residents(args.residents):
        condition(f"{args.residents} idle contexts", None)
        condition(f"{args.residents} idle contexts + cpu churn", "exit")
        condition(f"{args.residents} idle contexts + context churn", "context")
    condition("alone again", None)
    cpu_label = f"{args.residents} idle contexts + cpu churn"
    ctx_label = f"{args.residents} idle contexts + context churn"
    for name in kernels:
        base, ctx = results[cpu_label][name], results[ctx_label][name]
        print(f"{name}: context churn vs CPU churn: median {ctx['median_ms'] / base['median_ms']:.3f}x, "
              f"p90 {ctx['p90_ms'] / base['p90_ms']:.3f}x, p99 {ctx['p99_ms'] / base['p99_ms']:.3f}x")
    for name in kernels:
        idle = results[f"{args.residents} idle contexts"][name]["median_ms"] / results["alone"][name]["median_ms"]
        print(f"{name}: {args.residents} idle contexts vs alone: median {idle:.3f}x")
    ratios = [results[ctx_label][n]["median_ms"] / results[cpu_label][n]["median_ms"] for n in kernels]
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
    print(f"context churn vs CPU churn, median: {max(ratios):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
