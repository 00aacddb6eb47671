"""Children forked from the zygote are what ``python -m gpu_workers.child.main`` would be: their own
session, folder, scrubbed environment, descriptors and random state, with exit statuses reported
back, and a zygote that dies or is switched off costs nothing but speed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from gpu_workers.sandbox import process as sandbox
from gpu_workers.sandbox import zygote

PROBE = r'''
import json, os, random, sys
with open(f"/proc/{os.getppid()}/stat") as stat:  # the parent's parent: the keeper's
    gppid = int(stat.read().rsplit(")", 1)[1].split()[1])
facts = {
    "pid": os.getpid(), "ppid": os.getppid(), "gppid": gppid, "sid": os.getsid(0), "cwd": os.getcwd(),
    "env": dict(os.environ), "fds": sorted(int(f) for f in os.listdir("/proc/self/fd")),
    "random": random.random(), "argv0": sys.argv[0],
}
print("FACTS " + json.dumps(facts), flush=True)
'''


def _run_compile_child(source: str) -> sandbox.Child:
    """A compile child that ran ``source`` as the candidate's module and reported."""
    child = sandbox.spawn("compile", env_extra={"KA_PROBE": "yes"})
    child.send({"kernel_source": source, "env": {}, "spare": False})
    child.recv(time.monotonic() + 120)
    return child


def _facts(child: sandbox.Child) -> dict:
    for line in child.log_tail().splitlines():
        if line.startswith("FACTS "):
            return json.loads(line[6:])
    raise AssertionError(child.log_tail())


def test_a_forked_child_has_its_own_session_folder_environment_and_descriptors():
    with _run_compile_child(PROBE) as first, _run_compile_child(PROBE) as second:
        assert first.proc.wait(timeout=30) == 0 and second.proc.wait(timeout=30) == 0
        a, b = _facts(first), _facts(second)
        forker = zygote.zygote_for(sandbox.scrubbed_env())
        assert isinstance(first.proc, zygote.ForkedProcess)
        assert a["ppid"] == first.proc.keeper  # its keeper's child (sandbox.keeper) ...
        assert a["gppid"] == forker.proc.pid  # ... forked, not started with python -m
        assert a["sid"] == a["pid"]  # a session of its own: killpg reaches all it starts
        assert a["cwd"] == str(first.workdir)
        expected = sandbox.scrubbed_env({"KA_PROBE": "yes"})
        expected.update(HOME=str(first.workdir), TMPDIR=str(first.workdir))
        assert {k: v for k, v in a["env"].items() if k != "KA_ADDRESS_LIMIT"} == expected
        assert len(a["fds"]) <= 6  # stdin, the log twice, its two pipes (and the listing's own)
        assert a["random"] != b["random"]  # not the zygote's random state
        assert a["argv0"].endswith("child/main.py")


BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end:\n    pass\n"


def test_a_childs_cpu_seconds_outlive_it_once_it_has_reported_and_been_reaped():
    with _run_compile_child(BURN) as child:
        assert child.proc.wait(timeout=30) == 0  # its reaper's /proc entry for it is gone
        assert child.cpu_seconds() is not None and child.cpu_seconds() >= 0.3


def _ended_by(child: sandbox.Child, kernel_source: str) -> str:
    """The error a compile child's end gives, running ``kernel_source``."""
    with child:
        child.send({"kernel_source": kernel_source, "env": {}, "spare": False})
        with pytest.raises(sandbox.ChildError) as excinfo:
            child.recv(time.monotonic() + 120)
    return str(excinfo.value)


SELF_KILL = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"


def test_exit_codes_and_signals_come_back_as_popen_gives_them():
    assert "exited early with code 7" in _ended_by(sandbox.spawn("compile"), "import os\nos._exit(7)\n")
    killed = sandbox.spawn("compile")
    assert "killed by signal SIGKILL" in _ended_by(killed, SELF_KILL)
    assert killed.proc.returncode == -signal.SIGKILL


def test_a_child_the_systems_out_of_memory_killer_ended_says_so(monkeypatch):
    # given a child killed by SIGKILL (not by us) while the system's OOM-kill count rose
    killed = sandbox.spawn("compile")
    started_with = killed._oom_kills if killed._oom_kills is not None else 0
    monkeypatch.setattr(sandbox, "system_oom_kills", lambda: started_with + 1)
    message = _ended_by(killed, SELF_KILL)
    # then the error names the cause, not only the signal
    assert "killed by signal SIGKILL: the system's out-of-memory killer ended 1 process" in message
    assert "the host ran out of memory" in message


def test_a_dead_zygote_is_replaced_and_its_running_children_end():
    first = zygote.zygote_for(sandbox.scrubbed_env())
    waiting = sandbox.spawn("compile")  # waits for its setup: alive until the zygote goes
    os.kill(first.proc.pid, signal.SIGKILL)
    with waiting:
        assert waiting.proc.wait(timeout=30) == -signal.SIGKILL  # it asked to die with its parent
    deadline = time.monotonic() + 10
    while first.alive and time.monotonic() < deadline:
        time.sleep(0.05)
    with _run_compile_child(PROBE) as child:
        assert child.proc.wait(timeout=30) == 0
        second = zygote.zygote_for(sandbox.scrubbed_env())
        assert second is not first and _facts(child)["gppid"] == second.proc.pid


def test_the_zygote_imports_nothing_that_asks_cuda_for_its_devices_and_a_child_does_before_its_setup():
    """torch.utils.cpp_extension calls torch.cuda.is_available() at import wherever it finds CUDA_HOME:
    a process that forks must not have initialised the driver, so the zygote's preload (every role's)
    leaves it out and a compile or candidate child imports it itself, before its setup arrives."""
    probe = ("import sys\nfrom gpu_workers.child import main as child_main\n"
             "for role in child_main.PRELOAD:\n    child_main.preload(role)\n"
             "zygote = 'torch.utils.cpp_extension' in sys.modules\n"
             "child_main.preload('candidate', own=True)\n"
             "print(zygote, 'torch.utils.cpp_extension' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_a_child_that_kills_its_keeper_dies_and_its_daemon_with_it():
    # given a compile child forked from the zygote (the subreaper that adopts what a dead keeper leaves),
    # whose module leaves a setsid daemon, prints its pid, then kills its keeper
    from gpu_workers.sandbox import keeper

    source = (
        "import os, signal, time\n"
        "fork, session, leave = getattr(os, 'fo' + 'rk'), getattr(os, 'set' + 'sid'), getattr(os, '_ex' + 'it')\n"
        "r, w = os.pipe()\n"
        "if fork() == 0:\n"
        "    session()\n"
        "    if fork() == 0:\n"
        "        os.write(w, f'{os.getpid()}\\n'.encode())\n"
        "        time.sleep(600)\n"
        "    leave(0)\n"
        "print('DAEMON', os.read(r, 64).decode().strip(), flush=True)\n"
        "getattr(os, 'ki' + 'll')(os.getppid(), signal.SIGKILL)\n"
        "time.sleep(600)\n"
    )
    child = sandbox.spawn("compile")
    with child:
        assert isinstance(child.proc, zygote.ForkedProcess)
        child.send({"kernel_source": source, "env": {}, "spare": False})
        with pytest.raises(sandbox.ChildError):
            child.recv(time.monotonic() + 120)

        # then the child is gone (it dies with its keeper), and so is its daemon, which the zygote adopted
        assert child.proc.wait(timeout=30) == -signal.SIGKILL
        daemon = int(child.log_tail().split("DAEMON ", 1)[1].split()[0])
        assert not keeper.running(daemon)


HEAP_PROBE = r'''
import ctypes
libc = ctypes.CDLL(None)
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                 "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
blocks = [libc.malloc(72) for _ in range(20)]  # more than the per-thread cache holds of one size
before = libc.mallinfo2().smblks
for block in blocks:
    libc.free(block)
print(f"FASTBIN {libc.mallinfo2().smblks - before}", flush=True)
with open("/proc/self/environ", "rb") as exec_env:  # what the process was exec'd with: the zygote's
    print(f"EXEC_TUNABLES {b'GLIBC_TUNABLES=' in exec_env.read()}", flush=True)
'''


def _heap_probe(env_extra: dict[str, str]) -> tuple[int, bool]:
    """Of 20 small blocks a child frees, how many glibc put in its fastbins (all of them without its
    per-thread cache, which would take up to 7 of a size); and whether the process it was forked
    from was started with glibc tunables in its environment."""
    child = sandbox.spawn("compile", env_extra=env_extra)
    with child:
        child.send({"kernel_source": HEAP_PROBE, "env": {}, "spare": False})
        child.recv(time.monotonic() + 120)
        assert child.proc.wait(timeout=30) == 0
        assert isinstance(child.proc, zygote.ForkedProcess)
        lines = dict(x.split(" ", 1) for x in child.log_tail().splitlines() if x.startswith(("FASTBIN ", "EXEC_")))
    return int(lines["FASTBIN"]), lines["EXEC_TUNABLES"] == "True"


def test_a_cpu_childs_heap_policy_is_its_zygotes_from_exec():
    # glibc reads its tunables once, at exec: a forked child has them only if its zygote started with them
    from gpu_workers.build.compile import CPU_HEAP_TUNABLES

    assert _heap_probe({"GLIBC_TUNABLES": CPU_HEAP_TUNABLES}) == (20, True)  # no per-thread cache
    assert _heap_probe({})[1] is False  # the default zygote's children keep glibc's defaults


def test_a_closed_zygote_ends_on_its_own_instead_of_being_killed():
    """Its reader thread waits in recv on the socket: the close must still reach the zygote, which
    then leaves by itself (a worker process's exit is not held up by a kill's timeout)."""
    forker = zygote.Zygote(sandbox.scrubbed_env())
    assert forker.alive
    forker.close()
    assert forker.proc.returncode == 0, forker.log_tail()
