"""Children forked from a process that has already imported torch (a "zygote").

Every untrusted phase runs in a fresh process (``child``); started with ``python -m`` each one
imports torch again, two to three seconds of CPU, three times per evaluation: on a 16-core node
that, not the compilers or the GPU, is what limits evaluations per minute. The zygote imports torch
and the children's modules once and never runs task or candidate code, never touches CUDA and holds
no secret. For each child it forks; the fork starts a new session, takes the pipes and log it was
handed, replaces its whole environment with the one ``sandbox.process`` scrubbed for it, and runs
``child.main.main`` exactly as ``python -m gpu_workers.child.main`` would. Each child is still a fresh
process with its own CUDA context: a crash or a hung kernel in one touches no other.

Each child has a keeper between it and the zygote (``keeper``: the subreaper of everything the child
starts, which ends the child's whole tree before it exits). The zygote reaps the keepers and reports
each child's exit status to the worker, where ``ForkedProcess`` stands in for ``subprocess.Popen``; it
is a subreaper too, and kills any process it adopts (the tree of a keeper that candidate code killed). It exits when the worker's end of its
socket closes (the worker died or shut it down), and its children die with it (they ask for SIGKILL
when their parent dies). One zygote per worker process (a forked worker starts its own) and per
import-time environment. If it cannot start, children are started with ``python -m`` and the reason
is logged once.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from . import keeper

# What the zygote's own imports can depend on: a zygote is kept per set of these values.
_IMPORT_ENV = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CUDA_HOME", "CUDA_PATH", "OPENBLAS_CORETYPE",
               "OPENBLAS_L2_SIZE", "LANG", "LC_ALL", "TZ", "GLIBC_TUNABLES")
# Of a child's own environment, what its zygote must have had from the start (read at exec: the
# CPU children's heap policy, build.compile.CPU_HEAP_TUNABLES).
FROM_CHILD_ENV = ("GLIBC_TUNABLES",)
_MAX_MESSAGE = 1 << 20
_START_TIMEOUT_S = 120.0
_ADOPTED_WAIT_S = 5.0


class ZygoteError(RuntimeError):
    pass


# ---- the worker's side ---------------------------------------------------------------------
class ForkedProcess:
    """The parts of ``subprocess.Popen`` the sandbox uses, for a child the zygote forked."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str], keeper: int | None = None):
        self._zygote = zygote
        self.pid = pid
        self.keeper = keeper  # the child's keeper (see ``keeper``)
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_status(self.pid, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._zygote.exit_status(self.pid, timeout=timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.returncode = code
        return self.returncode


class Zygote:
    def __init__(self, env: dict[str, str]):
        self.owner = os.getpid()
        self.workdir = Path(tempfile.mkdtemp(prefix="kc-zygote-"))
        self.log_path = self.workdir / "zygote.log"
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = dict(env, HOME=str(self.workdir), TMPDIR=str(self.workdir), OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-u", "-m", "gpu_workers.sandbox.zygote", str(theirs.fileno())],
                cwd=self.workdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(),), start_new_session=True, close_fds=True)
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()  # one request at a time; replies come back in order
        self._changed = threading.Condition()
        self._replies: list[dict[str, Any]] = []
        self._exits: dict[int, int] = {}
        self._dead = False
        ours.settimeout(_START_TIMEOUT_S)
        try:
            ready = json.loads(ours.recv(_MAX_MESSAGE) or b"null")
        except (OSError, ValueError) as exc:
            self.close()
            raise ZygoteError(f"the zygote did not start: {exc}; {self.log_tail()}") from None
        if not isinstance(ready, dict) or not ready.get("ready"):
            self.close()
            raise ZygoteError(f"the zygote did not start: {self.log_tail()}")
        ours.settimeout(None)
        self._reader = threading.Thread(target=self._read, name="ka-zygote-reader", daemon=True)
        self._reader.start()

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-limit:].decode("utf-8", errors="replace")
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return not self._dead and self.proc.poll() is None

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(_MAX_MESSAGE)
                message = json.loads(data) if data else None
            except (OSError, ValueError):
                message = None
            with self._changed:
                if not isinstance(message, dict):
                    self._dead = True
                    self._changed.notify_all()
                    return
                if "exit" in message:
                    self._exits[int(message["exit"])] = int(message["status"])
                else:
                    self._replies.append(message)
                self._changed.notify_all()

    def fork(self, role: str, env: dict[str, str], cwd: Path, fds: tuple[int, int, int],
             remove: bool = False) -> ForkedProcess:
        """Fork a child for ROLE with these pipes (its input, its output) and log, all inherited;
        with ``remove``, its keeper removes ``cwd`` once the child's tree has ended."""
        request = json.dumps({"role": role, "env": env, "cwd": str(cwd), "remove": remove}).encode()
        with self._lock:
            if not self.alive:
                raise ZygoteError("the zygote is not running")
            try:
                socket.send_fds(self.sock, [request], list(fds))
            except OSError as exc:
                raise ZygoteError(f"the zygote did not take the request: {exc}") from None
            with self._changed:
                deadline = time.monotonic() + 30
                while not self._replies and not self._dead:
                    if not self._changed.wait(timeout=max(0.0, deadline - time.monotonic())):
                        break
                if not self._replies:
                    raise ZygoteError(f"the zygote did not fork: {self.log_tail()}")
                reply = self._replies.pop(0)
        if "pid" not in reply:
            raise ZygoteError(f"the zygote could not fork: {reply.get('error')}")
        return ForkedProcess(self, int(reply["pid"]), [role], int(reply["keeper"]))

    def exit_status(self, pid: int, timeout: float | None) -> int | None:
        """The child's exit status as Popen gives it (negative: killed by that signal); None if it
        is still running when ``timeout`` runs out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while pid not in self._exits:
                if self._dead:
                    return self._orphan_status(pid, deadline)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._changed.wait(timeout=remaining)
            return self._exits.pop(pid)

    def _orphan_status(self, pid: int, deadline: float | None) -> int | None:
        """The zygote is gone, so its children were sent SIGKILL and nobody will report them: wait
        until the process has disappeared."""
        while True:
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
                    state = handle.read().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                state = "gone"
            if state in ("gone", "Z", "X"):  # an unreaped orphan is a zombie: it has ended too
                return -signal.SIGKILL
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(0.02)

    def close(self) -> None:
        """Closing the socket ends the zygote (and, with it, any child still running). Shut down
        first: a close alone leaves the connection open while the reader thread waits in recv on it,
        and the zygote would see no end until ``wait``'s timeout killed it."""
        self._dead = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        keeper.remove_tree(self.workdir)


_zygotes: dict[tuple[int, tuple[tuple[str, str], ...]], Zygote] = {}
_zygotes_lock = threading.Lock()
_failed_at: list[float] = []  # when the last zygote failed to start: no retry for a minute


def zygote_for(base_env: dict[str, str]) -> Zygote | None:
    """This process's zygote for this import environment, started on first use; None when it
    cannot start (then the caller starts children with ``python -m``)."""
    key = (os.getpid(), tuple((k, base_env.get(k, "")) for k in _IMPORT_ENV))
    with _zygotes_lock:
        for other in [k for k in _zygotes if k[0] != os.getpid()]:
            _zygotes.pop(other)  # a forked worker's inherited entries: never its own children
        zygote = _zygotes.get(key)
        if zygote is not None and zygote.alive:
            return zygote
        if _failed_at and time.monotonic() - _failed_at[0] < 60:
            return None
        try:
            zygote = Zygote(base_env)
        except (ZygoteError, OSError) as exc:
            _failed_at[:] = [time.monotonic()]
            print(f"[kernelcourt] children start with python -m (no zygote): {exc}", file=sys.stderr, flush=True)
            return None
        _failed_at.clear()
        _zygotes[key] = zygote
        return zygote


def running() -> list[Zygote]:
    """This process's zygotes."""
    with _zygotes_lock:
        return [z for key, z in _zygotes.items() if key[0] == os.getpid()]


def close_all() -> None:
    with _zygotes_lock:
        for key in [k for k in _zygotes if k[0] == os.getpid()]:
            _zygotes.pop(key).close()


atexit.register(close_all)


# ---- the zygote's side ---------------------------------------------------------------------
def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(message).encode())
    except OSError:
        pass


def _exit_code(status: int) -> int:
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE = 1, 4


def _prctl(option: int, value: int) -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value)


def _die_with(parent: int) -> None:
    """SIGKILL when the zygote dies; if it died before we asked, go now. Dumpable again, as a child
    started with python -m is (the zygote is not, see serve)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)
    _prctl(_PR_SET_DUMPABLE, 1)


def _become_keeper(request: dict[str, Any], fds: list[int], zygote: int, report_fd: int,
                   own: tuple[int, ...]) -> None:
    """In the forked process: become the child's keeper (``keeper.keep``), which forks the child."""
    try:
        signal.set_wakeup_fd(-1)
        for fd in own:  # the zygote's socket and wake-up pipe are not the keeper's
            os.close(fd)
        me = os.getpid()
        remove = request["cwd"] if request.get("remove") else ""
        keeper.keep(lambda: _become_child(request, fds, me), report_fd, parent=zygote, hand_off=tuple(fds),
                    remove=remove)
    finally:
        os._exit(1)


def _become_child(request: dict[str, Any], fds: list[int], parent: int) -> None:
    """In the forked process: become what ``python -m gpu_workers.child.main ROLE IN OUT`` would be."""
    code = 1
    try:
        _die_with(parent)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        in_fd, out_fd, log_fd = fds
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        keep = {0, 1, 2, in_fd, out_fd}
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in request["env"].items()})
        tempfile.tempdir = None
        import random

        random.seed(os.urandom(32))
        from ..child import main as child_main

        sys.argv = [child_main.__file__, request["role"], str(in_fd), str(out_fd)]
        code = child_main.main([request["role"], str(in_fd), str(out_fd)])
    except BaseException:  # noqa: BLE001 - report in the child's log, never return into the zygote
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _reap(keepers: dict[int, int], ended: list[tuple[int, int]]) -> int:
    """Reap every child of the zygote that has ended; a keeper's status (it exits once its child's
    whole tree has ended) goes to ``ended`` as its child's. Returns how many were reaped."""
    reaped = 0
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped += 1
        if pid in keepers:
            ended.append((keepers.pop(pid), _exit_code(status)))


def _end_adopted(zygote_pid: int, keepers: dict[int, int], ended: list[tuple[int, int]]) -> None:
    """Kill and reap every process the zygote adopted (the tree of a keeper that candidate code
    killed), round after round: a killed process's own children are adopted here as it ends (a
    daemon whose parent outlived the keeper) and are killed in the next round, so once this returns
    none of that tree runs. A process that will not die (stuck in the kernel) ends the rounds after
    ``_ADOPTED_WAIT_S``; the next pass of the loop tries again."""
    deadline = time.monotonic() + _ADOPTED_WAIT_S
    while True:
        adopted = [pid for pid in keeper.children_of(zygote_pid) if pid not in keepers]
        if not adopted:
            return
        for pid in adopted:
            if keeper.running(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not _reap(keepers, ended):
            if time.monotonic() >= deadline:
                return
            time.sleep(0.002)  # killed, not yet ended: it needs a CPU to exit


def serve(fd: int) -> None:
    # Not dumpable: a child's native code cannot open /proc/<zygote>/mem or ptrace it to poison the
    # children forked after it (the zygote outlives every evaluation).
    _prctl(_PR_SET_DUMPABLE, 0)
    sock = socket.socket(fileno=fd)
    import torch

    from ..child import main as child_main

    for role in child_main.PRELOAD:
        child_main.preload(role)
    # Everything imported so far (torch and ours: ~170k objects) moves to the collector's permanent
    # generation, before every fork too: a child's collections never walk these objects, and so never
    # write to their pages, which stay shared with the zygote instead of being copied.
    gc.collect()
    gc.freeze()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    zygote_pid = os.getpid()
    keeper.become_subreaper()  # the tree of a keeper that candidate code killed comes here, and is killed
    keepers: dict[int, int] = {}  # keeper pid -> its child's pid
    _send(sock, {"ready": True, "pid": zygote_pid})
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [], 5.0)
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        ended: list[tuple[int, int]] = []
        _reap(keepers, ended)
        # before any child's status goes out: nothing of a killed keeper's tree runs once the worker has it
        _end_adopted(zygote_pid, keepers, ended)
        for child, status in ended:
            _send(sock, {"exit": child, "status": status})
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 8)
        except OSError:
            break
        if not data:
            break  # the worker is gone: leave, and our children die with us
        try:
            request = json.loads(data)
            if len(fds) != 3 or not isinstance(request, dict):
                raise ValueError("a request is a role, an environment, a folder and three descriptors")
            if torch.cuda.is_initialized():
                raise RuntimeError("CUDA was initialised in the zygote: children must not inherit it")
            gc.freeze()
            report_r, report_w = os.pipe()
            pid = os.fork()
        except (OSError, ValueError, RuntimeError) as exc:
            for handle in fds:
                os.close(handle)
            _send(sock, {"error": f"{type(exc).__name__}: {exc}"})
            continue
        if pid == 0:
            os.close(report_r)
            _become_keeper(request, fds, zygote_pid, report_w, (sock.fileno(), wake_r, wake_w))
        for handle in (*fds, report_w):
            os.close(handle)
        child = keeper.read_report(report_r, timeout_s=30.0)
        if child is None:
            _send(sock, {"error": "the keeper did not start the child"})
            continue
        keepers[pid] = child
        _send(sock, {"pid": child, "keeper": pid})
    keeper.remove_tree(os.getcwd())  # our own folder: the worker that made it may be gone
    os._exit(0)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
