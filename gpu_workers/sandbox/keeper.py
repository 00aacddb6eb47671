"""The keeper: the parent of one child, and the reaper of everything that child starts.

A child runs candidate code, and candidate code can start processes that leave its process group
and session (``fork``, ``setsid``, fork again): a process-group kill does not reach them, and once
their parent is gone they would be adopted by init and outlive the evaluation. Every child therefore
has a keeper of its own, a small process between the worker (or the zygote) and the child, marked
``PR_SET_CHILD_SUBREAPER``: whatever the child's descendants do, an orphan among them is adopted by
the keeper, never by init, so the keeper's subtree is exactly the evaluation's processes. The worker
counts that subtree at every pause point (``strays``); when the child ends, however it ends, the
keeper kills every process left in its subtree, reaps them, removes the child's working folder and
only then exits, with the child's own exit status (so a worker that sees the child's status knows
that nothing of it is left). If the worker or the zygote dies first, the keeper is told
(``PR_SET_PDEATHSIG``) and does the same; if candidate code kills the keeper, the child dies with it
and the zygote, a subreaper too, kills whatever it adopts. Only the standard library: the
``python -m`` path starts it as its own small interpreter.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import shutil
import signal
import stat
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36
REPORT_TIMEOUT_S = 60.0


def _prctl(option: int, value: int) -> bool:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Orphans among this process's descendants are adopted by it, not by init (Linux 3.4+)."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


# ---- the process tree, read from /proc ------------------------------------------------------------
def state(pid: int) -> str | None:
    """The process's state letter from ``/proc/PID/stat`` (R, S, T for stopped, Z…); None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def running(pid: int) -> bool:
    """The process exists and has not ended (a zombie, ended but not reaped, does not count)."""
    return state(pid) not in (None, "Z", "X")


def children_of(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's), zombies included: ``/proc/PID/task/*/children``,
    or a scan of every process's parent where the kernel lacks that file."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as handle:
                found.extend(int(p) for p in handle.read().split())
        except FileNotFoundError:
            return _children_by_scan(pid)
        except (OSError, ValueError):
            continue
    return found


def _children_by_scan(pid: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as handle:
                if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, zombies included."""
    seen: set[int] = set()
    todo = [pid]
    while todo:
        for child in children_of(todo.pop()):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def strays(keeper_pid: int, child_pid: int) -> list[int]:
    """The running processes of a child's evaluation besides the child itself: everything its
    keeper's subtree holds (the child's descendants, and the orphans the keeper adopted)."""
    return sorted(p for p in descendants(keeper_pid) - {child_pid} if running(p))


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove a folder whatever candidate code did to it (folders made unreadable or unwritable)."""

    def retry(function, target, _exc) -> None:
        try:
            parent = os.path.dirname(target)
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, stat.S_IRWXU)
                shutil.rmtree(target, ignore_errors=True)
            else:
                function(target)
        except OSError:
            pass

    if os.path.lexists(path):
        try:
            os.chmod(path, stat.S_IRWXU)
        except OSError:
            pass
        shutil.rmtree(path, onexc=retry) if sys.version_info >= (3, 12) else shutil.rmtree(path, onerror=retry)


# ---- the keeper's own side ------------------------------------------------------------------------
class _Stop(Exception):
    """The keeper's parent died or asked it to stop: end the child's whole tree now."""


def _stop(*_: object) -> None:
    raise _Stop()


def sweep() -> int:
    """Kill every process this (subreaper) process has below it and reap them, until none is
    left: a killed process's own children are adopted here and killed in the next round. Returns
    how many were killed."""
    killed = 0
    me = os.getpid()
    while True:
        for pid in children_of(me):
            if running(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
                except OSError:
                    pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return killed
        except InterruptedError:
            continue


def _mirror(status: int | None) -> None:
    """Exit as the child did: killed by the same signal, or with the same code."""
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else 1)


def keep(start_child: Callable[[], None], report_fd: int, *, parent: int, hand_off: tuple[int, ...] = (),
         remove: str = "") -> None:
    """Become the keeper (in a process just forked or started for it; never returns): start the
    child with ``start_child`` (in a fork, which must not return), write its pid to ``report_fd``,
    close the descriptors handed to the child, wait for it, then end its whole tree and remove
    ``remove`` (its working folder)."""
    status: int | None = None
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGHUP, _stop)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            raise _Stop()
        become_subreaper()
        try:
            os.setsid()  # out of the zygote's or worker's group: a signal to theirs is not ours
        except OSError:
            pass  # already a session leader (started with start_new_session)
        keeper_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGHUP, signal.SIG_DFL)
                _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the keeper gone: the child goes too
                if os.getppid() != keeper_pid:
                    os._exit(1)
                os.setsid()  # its own session and group: the worker's group kill is the child's alone
                os.close(report_fd)
                start_child()
            finally:
                os._exit(1)
        for fd in hand_off:
            os.close(fd)
        os.write(report_fd, f"{pid}\n".encode())
        os.close(report_fd)
        while True:
            try:
                ended, code = os.waitpid(-1, 0)  # adopted orphans that end are reaped here too
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if ended == pid:
                status = code
                break
    except _Stop:
        status = None
    except BaseException:  # noqa: BLE001 - whatever happens, end the tree below
        status = None
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        sweep()
        if remove:
            remove_tree(remove)
    finally:
        _mirror(status)


def read_report(fd: int, timeout_s: float = REPORT_TIMEOUT_S) -> int | None:
    """The child's pid, as its keeper wrote it; None if the keeper ended or said nothing in time."""
    data = b""
    try:
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], timeout_s)
            if not ready:
                return None
            chunk = os.read(fd, 64)
            if not chunk:
                return None
            data += chunk
        return int(data)
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def main(argv: list[str]) -> None:
    """``python -m gpu_workers.sandbox.keeper REPORT_FD REMOVE -- PROGRAM ARGS...``: keep PROGRAM."""
    report_fd, remove, sep, *program = argv
    if sep != "--" or not program:
        raise SystemExit("usage: keeper REPORT_FD REMOVE -- PROGRAM ARGS...")

    def start() -> None:
        os.execve(program[0], program, dict(os.environ))

    keep(start, int(report_fd), parent=os.getppid(), remove=remove)


if __name__ == "__main__":
    main(sys.argv[1:])
