"""The judge's channel from a child (numbered, HMAC-authenticated ``torch.save`` messages over a pipe)
against a bare pipe moving the same bytes, in one run: what our protocol costs on large outputs.

    python bench/transport.py [--mb 256] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SENDER = r"""
import os, sys, torch
sys.path.insert(0, sys.argv[1])
from gpu_workers.sandbox import wire
fd, mb, mode = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tensor = torch.randn(mb << 18)  # mb MiB of float32
if mode == "judge":
    wire.write_message(fd, {"phase": "timing_outputs", "seq": 1, "kept_outputs": [tensor]}, b"k" * 32)
else:
    raw = tensor.numpy().tobytes()
    wire.write_all(fd, [len(raw).to_bytes(8, "big"), raw])
os.close(fd)
"""


def one(mode: str, mb: int) -> float:
    from gpu_workers.sandbox import process as sandbox

    read_fd, write_fd = os.pipe()
    sandbox.widen_pipe(read_fd)
    proc = subprocess.Popen([sys.executable, "-c", SENDER, str(ROOT), str(write_fd), str(mb), mode],
                            pass_fds=(write_fd,))
    os.close(write_fd)
    child = sandbox.Child("bench", proc, -1, read_fd, Path("/tmp"), Path("/dev/null"), 0, owns_workdir=False,
                          mac_key=b"k" * 32 if mode == "judge" else None)
    deadline = time.monotonic() + 600
    child._fill(8, deadline)  # the sender has built its message: start the clock
    started = time.perf_counter()
    if mode == "judge":
        message = child.recv(deadline)
        assert message["kept_outputs"][0].numel() == mb << 18
    else:
        size = int.from_bytes(bytes(child._buffer[:8]), "big")
        received = len(child._buffer) - 8
        while received < size:
            chunk = os.read(read_fd, 1 << 20)
            received += len(chunk)
    elapsed = time.perf_counter() - started
    proc.wait()
    os.close(read_fd)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    raw = statistics.median(one("raw", args.mb) for _ in range(args.repeat))
    ours = statistics.median(one("judge", args.mb) for _ in range(args.repeat))
    print(f"{args.mb} MiB: bare pipe {raw:.3f} s ({args.mb / raw:.0f} MiB/s), judge channel {ours:.3f} s "
          f"({args.mb / ours:.0f} MiB/s, read + authenticate + decode)")
    print(f"judge channel vs bare pipe: {ours / raw:.2f}x the time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
