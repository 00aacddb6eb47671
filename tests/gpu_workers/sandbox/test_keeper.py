"""The keeper: a child's whole tree ends with it, and its status is the child's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from gpu_workers.sandbox import keeper

REPO_ROOT = Path(__file__).resolve().parents[3]

# Leaves a daemon (fork, setsid, fork), prints its pid, waits for its input to close, then exits 3
# (or, with an argument, kills itself with that signal).
DAEMONISER = """
import os, signal, sys, time
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.write(w, f"{os.getpid()}\\n".encode())
        time.sleep(600)
    os._exit(0)
os.wait()
print(os.read(r, 64).decode().strip(), flush=True)
sys.stdin.read()
if len(sys.argv) > 1:
    os.kill(os.getpid(), int(sys.argv[1]))
sys.exit(3)
"""


def keep(folder: Path, *args: str) -> tuple[subprocess.Popen, int]:
    report_r, report_w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "gpu_workers.sandbox.keeper", str(report_w), str(folder), "--",
                             sys.executable, "-c", DAEMONISER, *args], pass_fds=(report_w,), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    os.close(report_w)
    child = keeper.read_report(report_r)
    assert child is not None
    return proc, child


def test_a_setsid_daemon_is_the_keepers_and_ends_with_the_child(tmp_path):
    # given a kept child that left a daemon in a session of its own
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "locked").mkdir()
    (folder / "locked" / "file").write_text("x")
    (folder / "locked").chmod(0)  # as candidate code may leave its folder
    proc, child = keep(folder)
    daemon = int(proc.stdout.readline())

    # then while the child lives the daemon is counted in its tree
    assert keeper.strays(proc.pid, child) == [daemon]

    # when the child exits
    proc.stdin.close()
    code = proc.wait(timeout=60)

    # then its status is the keeper's, and neither the daemon nor the folder is left
    assert code == 3
    assert not keeper.running(daemon) and not keeper.running(child)
    assert not folder.exists()


def test_a_child_killed_by_a_signal_is_reported_so(tmp_path):
    # given a kept child that kills itself with SIGSEGV after leaving a daemon
    proc, child = keep(tmp_path / "absent", str(int(signal.SIGSEGV)))
    daemon = int(proc.stdout.readline())

    proc.stdin.close()

    # then the keeper ends as the child did, its daemon with it
    assert proc.wait(timeout=60) == -signal.SIGSEGV
    assert not keeper.running(daemon)


def test_killing_the_keeper_takes_the_child_with_it(tmp_path):
    # given a kept child
    proc, child = keep(tmp_path / "absent")
    proc.stdout.readline()

    # when its keeper is told to stop (as when its parent dies)
    proc.send_signal(signal.SIGTERM)

    # then the child and its daemon end before the keeper does
    assert proc.wait(timeout=60) == 1
    assert not keeper.running(child)
