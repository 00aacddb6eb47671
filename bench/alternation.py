"""Whether timing two processes in alternation cancels the host's drifting speed: the same
host-bound forward (a KernelBench task's ``Model``) in two fresh processes, A and B, each a plain
loop (``perf_counter`` around each call, the device synchronised before it), timed in rounds of
``--block`` calls. Per pair the ratio B/A is reported two ways from the same rounds:

  alternated   A's and B's rounds interleaved (A1 B1 A2 B2 ...), the median of each over all its rounds
  sequential   A's first half of rounds against B's second half: two timings one after the other,
               as a kept baseline and a later candidate are

Identity of code means every ratio should be 1; the spread of the ratios over ``--pairs`` pairs says
how far each way of timing lets the host's speed in. ``--pin CPU`` runs both processes of a pair on
one CPU; ``--load N`` keeps N busy processes beside them (neighbours' CPU work).

    python bench/alternation.py shared/kernelbench/level3/28_VisionTransformer.py --pairs 4 --pin 3
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r'''
import json, os, statistics, sys, time
sys.path.insert(0, {root!r})
import torch
from gpu_workers.tasks import load_task_module
pin = {pin!r}
if pin is not None:
    os.sched_setaffinity(0, {{pin}})
torch.set_num_threads(1)
task = load_task_module(open({task!r}).read(), None)
device = torch.device({device!r})
torch.manual_seed(0)
with device:
    inputs = list(task.get_inputs())
model = task.Model(*task.get_init_inputs()).to(device).eval()
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
with torch.no_grad():
    for _ in range(10):
        model(*inputs)
    sync()
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        times = []
        for _ in range({block!r}):
            sync()
            began = time.perf_counter()
            model(*inputs)
            times.append((time.perf_counter() - began) * 1e3)
        sync()
        print(json.dumps(times), flush=True)
'''


def _spin() -> None:  # a neighbour's CPU work
    while True:
        sum(i * i for i in range(10000))


def one_pair(args: argparse.Namespace) -> dict[str, float]:
    code = CHILD.format(root=str(ROOT), pin=args.pin, task=str(args.task), device=args.device, block=args.block)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, bufsize=1) for _ in range(2)]
    try:
        for p in procs:
            if p.stdout.readline().strip() != "ready":
                raise SystemExit(f"a child failed to start (exit {p.wait()})")
        rounds: list[list[list[float]]] = [[], []]
        for _ in range(args.rounds):
            for side, p in enumerate(procs):
                p.stdin.write("go\n")
                p.stdin.flush()
                rounds[side].append(json.loads(p.stdout.readline()))
    finally:
        for p in procs:
            p.stdin.close()
            p.wait(timeout=60)
    flat = [[t for r in side for t in r] for side in rounds]
    half = args.rounds // 2
    first_a = [t for r in rounds[0][:half] for t in r]
    second_b = [t for r in rounds[1][half:] for t in r]
    a, b = statistics.median(flat[0]), statistics.median(flat[1])
    return {"a_ms": round(a, 4), "b_ms": round(b, 4), "alternated": round(b / a, 4),
            "sequential": round(statistics.median(second_b) / statistics.median(first_a), 4),
            "round_ratios": [round(statistics.median(rb) / statistics.median(ra), 3)
                             for ra, rb in zip(rounds[0], rounds[1])]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--block", type=int, default=16, help="calls per round")
    parser.add_argument("--pin", type=int, default=None, help="both processes of a pair on this one CPU")
    parser.add_argument("--load", type=int, default=0, help="busy neighbour processes meanwhile")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.task.is_file():
        parser.error(f"{args.task}: no such task file")
    if args.rounds < 2:
        parser.error("--rounds must be 2 or more")
    load = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for p in load:
        p.start()
    try:
        pairs = []
        for i in range(args.pairs):
            pair = one_pair(args)
            pairs.append(pair)
            print(f"pair {i + 1}: A {pair['a_ms']:.3f} ms, B {pair['b_ms']:.3f} ms, alternated {pair['alternated']:.3f}, "
                  f"sequential {pair['sequential']:.3f}; rounds {pair['round_ratios']}", flush=True)
    finally:
        for p in load:
            p.kill()
    for way in ("alternated", "sequential"):
        ratios = [p[way] for p in pairs]
        worst = max(abs(r - 1) for r in ratios)
        print(f"{args.task.stem} pin={args.pin} load={args.load} {way}: ratios {min(ratios):.3f}-{max(ratios):.3f}, "
              f"worst |r-1| {worst:.3f}, within 0.03: {sum(abs(r - 1) <= 0.03 for r in ratios)} of {len(ratios)}")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps({"task": args.task.stem, "pin": args.pin, "load": args.load, "pairs": pairs}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
