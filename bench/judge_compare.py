"""The judge's output comparison (one chunked pass) against the plain whole-tensor way (float64
copies, ``torch.allclose``, ``torch.linalg.vector_norm``), side by side on one GPU-sized output.
With ``--concurrent K``: K threads comparing at once, as K evaluations of a worker judge at once, with
torch's default thread count against the judge's cap (``judge.limit_threads``): the CPU seconds
each comparison costs, each setting in a fresh process.

    python bench/judge_compare.py [--elements 33554432]
    python bench/judge_compare.py --elements 1048576 --concurrent 16 --repeat 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def plain(c, r, r64, atol: float, rtol: float) -> tuple[bool, float]:
    import torch

    cd, rd = c.double(), r.double()
    ok = bool(torch.isfinite(cd).all()) and torch.allclose(cd, rd, atol=atol, rtol=rtol, equal_nan=True)
    rel = float(torch.linalg.vector_norm(cd - r64) / torch.linalg.vector_norm(r64))
    return ok, rel


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--elements", type=int, default=4096 * 8192)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--concurrent", type=int, default=0, help="threads comparing at once (CPU cost mode)")
    parser.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)  # one setting, in this process
    args = parser.parse_args()
    if args.concurrent:
        return concurrent(args)

    import torch

    from gpu_workers.judge import compare_outputs

    r = torch.randn(args.elements)
    c = r + 1e-6 * torch.randn(args.elements)
    r64 = r.double()

    def clock(fn) -> float:
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    base = clock(lambda: plain(c, r, r64, 1e-2, 1e-2))
    ours = clock(lambda: compare_outputs([c], [r], [r64], 1e-2, 1e-2))
    ok_plain, rel_plain = plain(c, r, r64, 1e-2, 1e-2)
    got = compare_outputs([c], [r], [r64], 1e-2, 1e-2)
    print(f"{args.elements} float32 elements, {torch.get_num_threads()} threads: plain {base:.3f} s, "
          f"judge {ours:.3f} s; same verdict {ok_plain == got.ok}, relative errors {rel_plain:.3e} / {got.rel_norm:.3e}")
    print(f"judge comparison vs plain: {base / ours:.2f}x faster")
    return 0


def concurrent(args: argparse.Namespace) -> int:
    import os
    import subprocess

    if not args.threads:  # the driver: each setting in its own process (torch's threads are set once per thread)
        import torch

        costs = {}
        for threads in (torch.get_num_threads(), 1):
            line = subprocess.run([sys.executable, __file__, "--elements", str(args.elements), "--repeat",
                                   str(args.repeat), "--concurrent", str(args.concurrent), "--threads", str(threads)],
                                  check=True, capture_output=True, text=True).stdout.strip()
            print(line, flush=True)
            costs[threads] = float(line.rsplit("=", 1)[1].split()[0])
        default = next(iter(costs))
        print(f"judge CPU per comparison, {default} torch threads vs the cap of 1: {costs[default] / costs[1]:.2f}x")
        return 0
    import threading

    import torch

    from gpu_workers.judge import compare_outputs

    torch.set_num_threads(args.threads)
    r = torch.randn(args.elements)
    c = r + 1e-6 * torch.randn(args.elements)
    r64 = r.double()

    def work() -> None:
        for _ in range(args.repeat):
            compare_outputs([c], [r], [r64], 1e-2, 1e-2)

    workers = [threading.Thread(target=work) for _ in range(args.concurrent)]
    wall, cpu = time.perf_counter(), time.process_time()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = args.concurrent * args.repeat
    print(f"{args.concurrent} threads comparing {args.elements} float32 elements at once, torch threads "
          f"{args.threads} (of {os.cpu_count()} CPUs): {n} comparisons in {wall:.2f} s, CPU per comparison "
          f"= {cpu / n * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
