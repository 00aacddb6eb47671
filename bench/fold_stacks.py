"""What a process's Python threads spent their samples on: py-spy's collapsed stacks (``record -f raw``)
folded into the share of samples each leaf frame and each function on the stack had.

    python bench/fold_stacks.py realwork.gil.txt --rate 50 --seconds 60

With ``--rate`` and ``--seconds`` (of a ``record --gil`` run) it also says in what share of the
sampling instants some thread held the GIL: near 100% the interpreter is the pool's bottleneck, and
spreading its evaluations over processes (``LocalPool(processes=P)``) should help.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path


def fold(lines: list[str], depth: int = 1) -> tuple[int, collections.Counter, collections.Counter]:
    """(samples, by leaf frames, by any frame on the stack) of collapsed-stack lines."""
    leaves: collections.Counter = collections.Counter()
    anywhere: collections.Counter = collections.Counter()
    total = 0
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        leaves[";".join(frames[-depth:])] += n
        for frame in set(frames):
            anywhere[frame] += n
    return total, leaves, anywhere


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stacks", help="py-spy record -f raw output")
    parser.add_argument("--depth", type=int, default=1, help="frames of each leaf shown together")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--rate", type=float, default=None, help="samples per second py-spy took")
    parser.add_argument("--seconds", type=float, default=None, help="how long it sampled")
    args = parser.parse_args(argv)
    path = Path(args.stacks)
    if not path.is_file():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    total, leaves, anywhere = fold(path.read_text(encoding="utf-8", errors="replace").splitlines(), args.depth)
    print(f"{path.name}: {total} samples")
    if args.rate and args.seconds and total:
        instants = args.rate * args.seconds
        print(f"a thread held the GIL in {100 * min(total, instants) / instants:.0f}% of {instants:.0f} instants "
              "(with record --gil)")
    if not total:
        return 0
    print("by leaf frame:")
    for frame, n in leaves.most_common(args.top):
        print(f"  {100 * n / total:5.1f}%  {frame[:200]}")
    print("by frame anywhere on the stack:")
    for frame, n in anywhere.most_common(args.top * 2):
        print(f"  {100 * n / total:5.1f}%  {frame[:200]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
