"""The GPU slot's policy under load, with stand-in work: N evaluations in N processes, each a few
rounds of shared work (stretches between pause points) and a timing alone, on one slot. Work is
sleeping (the slot orders holders; what they do meanwhile, host or device work, is theirs), so the
figures are the policy's: wall time, the mean number of shared holders, and timings' waits, with
waiting work let in before the next timer (the slot as it is) and without (``YIELD_MAX_S = 0``).

With ``--children`` each evaluation's stretches run in a real child process, which sends a message
at each pause point as the evaluator's children do (5 ms sleeps, so time it spends stopped is not
work done), and the two policies compared are a timer waiting for every holder's next pause point,
and the slot as it is: a holder mid-stretch stopped for a waiting timer (``Child.yield_to_timers``).

    python bench/slot_policy.py --evaluations 16 --rounds 3 --stretch-ms 200 --timing-ms 50
    python bench/slot_policy.py --children --stretch-ms 400 --timing-ms 100
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


# The stand-in child: per stretch, its milliseconds in 5 ms sleeps, then a checkpoint message, then
# it waits for its parent's go (one byte).
_CHILD = r"""
import os, sys, time
from gpu_workers.sandbox import wire
for ms in map(int, sys.argv[1].split(",")):
    for _ in range(ms // 5):
        time.sleep(0.005)
    wire.write_all(1, wire.encode_parts({"phase": "checkpoint"}))
    assert os.read(0, 1) == b"g"
"""


def _evaluation_in_a_child(args: tuple[int, float, float, int, int, bool, str]) -> dict[str, float]:
    seed, stretch_s, timing_s, rounds, stretches, stop, cache = args
    os.environ["KERNELCOURT_CACHE_DIR"] = cache
    import subprocess

    from gpu_workers.sandbox import gpuslot
    from gpu_workers.sandbox import process as sandbox

    plan = [int(1000 * stretch_s * (0.5 + ((seed * 7 + r * 3 + k) % 5) / 4)) for r in range(rounds)
            for k in range(stretches)]
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, ",".join(map(str, plan))], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    child = sandbox.Child("stand-in", proc, proc.stdin.fileno(), proc.stdout.fileno(), Path(cache),
                          Path("/dev/null"), 0, owns_workdir=False)
    use = gpuslot.SlotUse()
    began = time.monotonic()
    with gpuslot.gpu_slot(GPU, use) as slot:
        child.gpu_slot = slot if stop else None
        for _ in range(rounds):
            for k in range(stretches):
                child.recv(time.monotonic() + 600)
                slot.pause_point(f"work {k}")
                child.signal()
            slot.exclusive()
            time.sleep(timing_s)
            slot.shared()
        child.gpu_slot = None
    proc.wait()
    return {"wall_s": time.monotonic() - began, "held_s": use.held_s, "wait_s": use.wait_s,
            "timer_wait_s": use.exclusive_wait_s, "stops": use.stops}


def run(n: int, stretch_s: float, timing_s: float, rounds: int, stretches: int, policy: float | bool,
        children: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="kc-slot-bench-") as cache:
        began = time.monotonic()
        with multiprocessing.get_context("spawn").Pool(n) as pool:
            rows = pool.map(_evaluation_in_a_child if children else _evaluation,
                            [(i, stretch_s, timing_s, rounds, stretches, policy, cache) for i in range(n)])
        wall = time.monotonic() - began
    held = sum(r["held_s"] for r in rows)
    return {"wall_s": round(wall, 3), "mean_holders": round(held / wall, 2),
            "timer_wait_s": round(sum(r["timer_wait_s"] for r in rows) / n, 3),
            "wait_s": round(sum(r["wait_s"] for r in rows) / n, 3),
            "stops": sum(int(r.get("stops", 0)) for r in rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evaluations", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stretches", type=int, default=4, help="pause points per round")
    parser.add_argument("--stretch-ms", type=float, default=200.0)
    parser.add_argument("--timing-ms", type=float, default=50.0)
    parser.add_argument("--children", action="store_true",
                        help="stretches in child processes: pause points only, against holders stopped mid-stretch")
    args = parser.parse_args(argv)
    from gpu_workers.sandbox.gpuslot import YIELD_MAX_S

    shape = (args.evaluations, args.stretch_ms / 1000, args.timing_ms / 1000, args.rounds, args.stretches)
    ideal = args.rounds * (args.stretches * args.stretch_ms / 1000 + args.evaluations * args.timing_ms / 1000)
    if args.children:
        waiting = run(*shape, False, children=True)
        stopping = run(*shape, True, children=True)
        print(json.dumps({"pause points only": waiting, "stopped mid-stretch": stopping,
                          "lower_bound_s": round(ideal, 3)}, indent=1))
        print(f"wall: {waiting['wall_s']:.2f} s with timers waiting for pause points, {stopping['wall_s']:.2f} s "
              f"with holders stopped mid-stretch ({waiting['wall_s'] / stopping['wall_s']:.2f}x); a timer's wait "
              f"{waiting['timer_wait_s']:.3f} -> {stopping['timer_wait_s']:.3f} s per evaluation")
        return 0
    without = run(*shape, 0.0)
    with_ = run(*shape, YIELD_MAX_S)
    print(json.dumps({"without": without, "with": with_, "lower_bound_s": round(ideal, 3)}, indent=1))
    print(f"wall: {without['wall_s']:.2f} s without letting waiting work in, {with_['wall_s']:.2f} s with "
          f"({without['wall_s'] / with_['wall_s']:.2f}x); mean shared holders {without['mean_holders']} -> "
          f"{with_['mean_holders']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
