"""The parent's side of a child: while it waits for a message from a child working under a shared GPU
slot, the child's whole tree is stopped for a waiting timer and goes on after the timing, and the
time it was kept stopped is not its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from gpu_workers.sandbox import keeper, wire
from gpu_workers.sandbox import process as sandbox
from gpu_workers.sandbox.gpuslot import SlotUse, gpu_slot

HARDWARE = {"name": "NVIDIA H200", "gpu": {"index": 0, "uuid": "GPU-test-process-stop"}}

# A child with a grandchild in a session of its own (a process-group signal never reaches it): it
# names the grandchild, waits for one byte, then sends the prepared message and ends both.
CHILD = r"""
import os, signal, sys
grandchild = os.fork()
if grandchild == 0:
    os.setsid()
    while True:
        pass
sys.stderr.write(f"{grandchild}\n"); sys.stderr.flush()
assert os.read(0, 1) == b"g"
with open(sys.argv[1], "rb") as blob:
    data = blob.read()
os.write(1, data)
os.kill(grandchild, signal.SIGKILL)
os.waitpid(grandchild, 0)
"""


def _end(proc: subprocess.Popen, grandchild: int) -> None:
    """The child and its grandchild, which a kill of the child alone leaves spinning in its own session
    (the child ends it only after its message, and may be killed first)."""
    proc.kill()
    proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.kill(grandchild, signal.SIGKILL)


def test_a_child_under_a_shared_slot_is_stopped_whole_for_a_timer_and_its_wait_is_not_its_time(tmp_path: Path):
    # given a child at work (its grandchild spinning) and a message it sends once told to
    blob = tmp_path / "message"
    blob.write_bytes(b"".join(bytes(p) for p in wire.encode_parts({"phase": "checkpoint", "seq": 1})))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(blob)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    grandchild = int(proc.stderr.readline())
    child = sandbox.Child("reference", proc, proc.stdin.fileno(), proc.stdout.fileno(), tmp_path,
                          Path("/dev/null"), 0, owns_workdir=False)
    seen: dict[str, str | None] = {}
    use, timer_use = SlotUse(), SlotUse()
    timer_in = threading.Event()

    def timer():
        with gpu_slot(HARDWARE, timer_use, mode="exclusive"):
            seen["child"], seen["grandchild"] = keeper.state(proc.pid), keeper.state(grandchild)
            timer_in.set()
            child.signal()  # read only once the child goes on

    try:
        with gpu_slot(HARDWARE, use) as slot:
            child.gpu_slot = slot
            # when a timer queues while the parent waits for the child's message
            thread = threading.Thread(target=timer)
            thread.start()
            message = child.recv(time.monotonic() + 60)
            thread.join()
    finally:
        child.gpu_slot = None
        _end(proc, grandchild)
    # then the timer had the GPU while both processes were stopped, and the child went on after it
    assert timer_in.is_set()
    assert seen == {"child": "T", "grandchild": "T"}
    assert message == {"phase": "checkpoint", "seq": 1}
    assert use.stops == 1 and child.stopped_s > 0 and timer_use.exclusive_wait_s < 30


def test_a_released_slot_never_stops_its_child(tmp_path: Path):
    # given a child whose slot was let go (CPU work alone follows, as while a large message travels)
    blob = tmp_path / "message"
    blob.write_bytes(b"".join(bytes(p) for p in wire.encode_parts({"phase": "done", "seq": 1})))
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(blob)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    grandchild = int(proc.stderr.readline())
    child = sandbox.Child("candidate", proc, proc.stdin.fileno(), proc.stdout.fileno(), tmp_path,
                          Path("/dev/null"), 0, owns_workdir=False)
    use = SlotUse()
    try:
        with gpu_slot(HARDWARE, use) as slot:
            slot.release("candidate: timing_read")
            child.gpu_slot = slot
            child.signal()
            # when it sends its message with no hold of the GPU
            assert child.recv(time.monotonic() + 60) == {"phase": "done", "seq": 1}
    finally:
        _end(proc, grandchild)
    # then it was never stopped
    assert use.stops == 0 and child.stopped_s == 0.0
    assert os.path.exists("/proc/self")  # the states above were read from /proc
