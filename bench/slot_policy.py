"""The GPU slot's policy under load, with stand-in work: N evaluations in N processes, each a few
rounds of shared work (stretches between pause points) and a timing alone, on one slot. Work is
a sleep (the slot orders holders; what they do meanwhile, host or device work, is theirs), so the
figures are the policy's: wall time, the mean number of shared holders, and timings' waits, with
waiting work let in before the next timer (the slot as it is) and without (``YIELD_MAX_S = 0``).

    python bench/slot_policy.py --evaluations 16 --rounds 3 --stretch-ms 200 --timing-ms 50
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GPU = {"name": "stand-in", "gpu": {"index": 0, "uuid": "slot-policy-bench"}}


def _evaluation(args: tuple[int, float, float, int, int, float, str]) -> dict[str, float]:
    seed, stretch_s, timing_s, rounds, stretches, yield_max_s, cache = args
    os.environ["KERNELCOURT_CACHE_DIR"] = cache
    from gpu_workers.sandbox import gpuslot

    gpuslot.YIELD_MAX_S = yield_max_s
    use = gpuslot.SlotUse()
    began = time.monotonic()
    with gpuslot.gpu_slot(GPU, use) as slot:
        for r in range(rounds):
            for k in range(stretches):
                time.sleep(stretch_s * (0.5 + ((seed * 7 + r * 3 + k) % 5) / 4))  # 0.5x to 1.5x
                slot.pause_point(f"work {k}")
            slot.exclusive()
            time.sleep(timing_s)
            slot.shared()
    return {"wall_s": time.monotonic() - began, "held_s": use.held_s, "wait_s": use.wait_s,
            "timer_wait_s": use.exclusive_wait_s}


def run(n: int, stretch_s: float, timing_s: float, rounds: int, stretches: int, yield_max_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="kc-slot-bench-") as cache:
        began = time.monotonic()
        with multiprocessing.get_context("spawn").Pool(n) as pool:
            rows = pool.map(_evaluation, [(i, stretch_s, timing_s, rounds, stretches, yield_max_s, cache)
                                          for i in range(n)])
        wall = time.monotonic() - began
    held = sum(r["held_s"] for r in rows)
    return {"wall_s": round(wall, 3), "mean_holders": round(held / wall, 2),
            "timer_wait_s": round(sum(r["timer_wait_s"] for r in rows) / n, 3),
            "wait_s": round(sum(r["wait_s"] for r in rows) / n, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluations", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stretches", type=int, default=4, help="pause points per round")
    parser.add_argument("--stretch-ms", type=float, default=200.0)
    parser.add_argument("--timing-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    from gpu_workers.sandbox.gpuslot import YIELD_MAX_S

    shape = (args.evaluations, args.stretch_ms / 1000, args.timing_ms / 1000, args.rounds, args.stretches)
    without = run(*shape, 0.0)
    with_ = run(*shape, YIELD_MAX_S)
    ideal = args.rounds * (args.stretches * args.stretch_ms / 1000 + args.evaluations * args.timing_ms / 1000)
    print(json.dumps({"without": without, "with": with_, "lower_bound_s": round(ideal, 3)}, indent=1))
    print(f"wall: {without['wall_s']:.2f} s without letting waiting work in, {with_['wall_s']:.2f} s with "
          f"({without['wall_s'] / with_['wall_s']:.2f}x); mean shared holders {without['mean_holders']} -> "
          f"{with_['mean_holders']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
