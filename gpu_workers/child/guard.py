"""An audit hook that walls the judge off from the candidate inside the candidate's process.

Installed before the candidate is imported and impossible to remove (PEP 578). It refuses what a
candidate would need to reach the judge's state or anything outside its own process: frames (and so
the judge's locals and its channel key), the garbage collector's object lists, memory reads through
ctypes or /proc, signals to other processes, and — once import and warm-up are over — new
processes. The judge's own code that needs one of these runs inside ``guard.exempt()``, a context
manager that only the judge holds (the candidate has no path to it without frames or gc).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

_ALWAYS = frozenset({
    "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.get_objects",
    "gc.get_referrers", "gc.get_referents", "os.kill", "os.killpg", "signal.pthread_kill",
    "sys.addaudithook", "cpython.remote_debugger_script", "cpython.run_interactivehook",
    "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at", "ctypes.cdata", "ctypes.cdata/buffer",
})
# Allowed while the candidate imports and warms up (ninja, dlopen of its own library), refused after.
_AFTER_SEAL = frozenset({
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "pty.spawn", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function", "socket.connect", "socket.bind",
    "mmap.__new__",
})
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_locals", "f_globals",
                               "gi_code", "cr_code", "__closure__"})
_SAFE_PROC = ("/proc/self/task", "/proc/self/status", "/proc/thread-self/status", "/proc/self/fd",
              "/proc/self/maps", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat")


class Blocked(AttributeError, ValueError):
    """Raised inside candidate code; stdlib fallbacks that expect AttributeError/ValueError keep working."""

    pass


class Guard:
    """Handle returned by ``install``; keep it in a local, never in a global."""

    def __init__(self) -> None:
        self._state: dict = {"exempt": 0, "sealed": False, "violations": []}

    @property
    def violations(self) -> list[str]:
        """What candidate code tried and was refused (even if it caught the exception)."""
        return list(self._state["violations"])

    def seal(self) -> None:
        self._state["sealed"] = True

    @contextmanager
    def exempt(self) -> Iterator[None]:
        self._state["exempt"] += 1
        try:
            yield
        finally:
            self._state["exempt"] -= 1


def _forbidden_path(path: object, own_pid: str) -> bool:
    if not isinstance(path, str | bytes):
        return False
    text = os.fsdecode(path)
    if "/proc" not in text and "/dev/mem" not in text:
        return False
    real = os.path.realpath(text)
    if real.startswith(("/dev/mem", "/dev/kmem")):
        return True
    if not real.startswith("/proc/"):
        return False
    if real.startswith(_SAFE_PROC) or real.startswith(f"/proc/{own_pid}/task") or real == f"/proc/{own_pid}/status":
        return False
    return True


def install() -> Guard:
    guard = Guard()
    state = guard._state
    own_pid = str(os.getpid())

    def refuse(what: str) -> None:
        if len(state["violations"]) < 20:
            state["violations"].append(what)
        raise Blocked(f"the judge blocks {what} in candidate code")

    def hook(event: str, args: tuple) -> None:
        if state["exempt"]:
            return
        if event in _ALWAYS or (state["sealed"] and event in _AFTER_SEAL):
            refuse(event)
        if event == "object.__getattr__" and len(args) > 1 and args[1] in _FRAME_ATTRIBUTES:
            refuse(f"access to {args[1]}")
        if event == "open" and args and _forbidden_path(args[0], own_pid):
            refuse(f"opening {str(args[0])[:80]!r}")

    sys.addaudithook(hook)
    return guard
