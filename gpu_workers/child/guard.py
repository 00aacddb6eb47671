"""An audit hook that walls the judge off from the candidate inside the candidate's process.

Installed before the candidate is imported and impossible to remove (PEP 578). It refuses what a
candidate would need to reach the judge's state or anything outside its own process: frames (and so
the judge's locals and its channel key), the garbage collector's object lists, memory reads through
ctypes or /proc, signals to other processes, and — once import and warm-up are over — new
processes. The judge's own code that needs one of these runs inside ``guard.exempt()``, a context
manager that only the judge holds (the candidate has no path to it without frames or gc).

Frames are refused to whoever asks, with two exceptions that keep honest code working: library
functions that read frames for their own use and hand none back (``logging`` finding its caller,
``traceback`` summarising a stack as text, ``typing`` and ``collections`` reading a caller's module
name) get them, recognised by the identity of their code objects, which no candidate can forge.
Every refusal says who asked: the candidate's own code (compiled from its source: a
``sandbox_violation``) or library code it called (a failure of that call, never a violation).
"""

from __future__ import annotations

import os
import re
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
_FRAME_EVENTS = frozenset({"sys._getframe", "sys._current_frames"})
_FRAME_ATTRIBUTES = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_locals", "f_globals",
                               "gi_code", "cr_code", "__closure__"})
_SAFE_PROC = ("/proc/self/task", "/proc/self/status", "/proc/thread-self/status", "/proc/self/fd",
              "/proc/self/maps", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat")


# Library functions that take a frame and keep it: (module, dotted name). Code objects nested in them
# (generators, comprehensions) count as theirs.
_FRAME_CONSUMERS = (
    ("logging", "Logger.findCaller"), ("traceback", "extract_stack"), ("traceback", "format_stack"),
    ("traceback", "print_stack"), ("traceback", "StackSummary.extract"),
    ("traceback", "StackSummary._extract_from_extended_frame_gen"), ("typing", "_caller"),
    ("collections", "namedtuple"), ("enum", "EnumType._create_"), ("enum", "EnumMeta._create_"),
    ("enum", "Enum._missing_"), ("typing_extensions", "_caller"),
    ("typing_extensions", "_has_generic_or_protocol_as_origin"), ("torch._jit_internal", "get_class_name_lineno"),
    # torch's operator registrations record where they were made: a caller's file and line, its
    # module's name, or "file:line" (what torch.jit.trace's first use imports registers this way)
    ("torch.library", "Library.__init__"), ("torch.library", "Library._register_fake"),
    ("torch._library.utils", "get_source"),
    # torch.jit.trace names a traced value after the caller's local that holds it: a name, never a value
    ("torch.jit._trace", "_create_interpreter_name_lookup_fn"),
)
# Library functions that return a frame to their caller: trusted only when that caller is a consumer.
_FRAME_PROVIDERS = (("logging", "currentframe"), ("inspect", "currentframe"), ("traceback", "walk_tb"),
                    ("traceback", "_walk_tb_with_full_positions"))
# What a candidate reaches frames through when it asks for them itself: asked for by candidate code,
# these count as the candidate's own request.
_FRAME_ACCESSORS = _FRAME_PROVIDERS + (
    ("traceback", "walk_stack"), ("inspect", "stack"), ("inspect", "trace"), ("inspect", "getouterframes"),
    ("inspect", "getinnerframes"), ("inspect", "getframeinfo"),
)
_CANDIDATE_FILES = ("<kernel>",)
_CANDIDATE_MODULES = ("kernelcourt_candidate",)


def _codes(pairs: tuple[tuple[str, str], ...]) -> frozenset:
    """The code objects of the named functions, with every code object nested in them."""
    import importlib

    found: set = set()
    for module_name, dotted in pairs:
        try:
            target: object = importlib.import_module(module_name)
            for part in dotted.split("."):
                target = getattr(target, part)
        except (ImportError, AttributeError):
            continue
        target = getattr(target, "__func__", target)
        code = getattr(target, "__code__", None)
        stack = [code] if code is not None else []
        while stack:
            current = stack.pop()
            found.add(current)
            stack.extend(c for c in current.co_consts if isinstance(c, type(current)))
    return frozenset(found)


def _candidate_frame(frame: object) -> bool:
    code = frame.f_code  # type: ignore[attr-defined]
    return (code.co_filename in _CANDIDATE_FILES
            or frame.f_globals.get("__name__") in _CANDIDATE_MODULES)  # type: ignore[attr-defined]


def _who(frame: object, accessors: frozenset) -> str:
    """``candidate code``, or ``library code (module.function)``, for the frame that asked: a frame
    accessor (``inspect.currentframe``…) called by candidate code asks for the candidate."""
    if frame is None or _candidate_frame(frame):
        return "candidate code"
    code = frame.f_code  # type: ignore[attr-defined]
    back = frame.f_back  # type: ignore[attr-defined]
    if code in accessors and back is not None:
        if _candidate_frame(back):
            return "candidate code"
        return f"library code ({_name(back)}, through {_name(frame)})"  # who asked, and how
    return f"library code ({_name(frame)})"


def _name(frame: object) -> str:
    code = frame.f_code  # type: ignore[attr-defined]
    module = frame.f_globals.get("__name__", "?")  # type: ignore[attr-defined]
    return f"{module}.{getattr(code, 'co_qualname', code.co_name)}"


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
    if real.startswith(_SAFE_PROC) or real == f"/proc/{own_pid}/status":
        return False
    # its threads' listing and their counters, never a thread's memory or maps (/proc/thread-self/mem
    # resolves beneath /proc/<pid>/task/<tid>/)
    if re.fullmatch(rf"/proc/{own_pid}/task(/\d+(/(children|status|stat|schedstat|comm))?)?", real):
        return False
    return True


def install() -> Guard:
    import threading

    guard = Guard()
    state = guard._state
    own_pid = str(os.getpid())
    consumers = _codes(_FRAME_CONSUMERS)
    providers = _codes(_FRAME_PROVIDERS)
    accessors = _codes(_FRAME_ACCESSORS)
    getframe = sys._getframe
    inside = threading.local()  # the hook's own frame lookups raise events that it must not judge

    def asker() -> object:
        """The Python frame whose operation raised the event (the hook's caller)."""
        inside.busy = True
        try:
            return getframe(2)
        except ValueError:
            return None
        finally:
            inside.busy = False

    def trusted(frame: object) -> bool:
        if frame is None:
            return False
        code = frame.f_code  # type: ignore[attr-defined]
        if code in consumers:
            return True
        back = frame.f_back  # type: ignore[attr-defined]
        return code in providers and back is not None and back.f_code in consumers

    def refuse(what: str, frame: object) -> None:
        who = _who(frame, accessors)
        if len(state["violations"]) < 20:
            state["violations"].append(what if who == "candidate code" else f"{what} by {who}")
        raise Blocked(f"the judge blocks {what} in {who}")

    def hook(event: str, args: tuple) -> None:
        if state["exempt"] or getattr(inside, "busy", False):
            return
        frames = event in _FRAME_EVENTS or (event == "object.__getattr__" and len(args) > 1
                                            and args[1] in _FRAME_ATTRIBUTES)
        if frames or event in _ALWAYS or (state["sealed"] and event in _AFTER_SEAL):
            frame = asker()
            if frames and trusted(frame):
                return
            refuse(event if event != "object.__getattr__" else f"access to {args[1]}", frame)
        if event == "open" and args and _forbidden_path(args[0], own_pid):
            refuse(f"opening {str(args[0])[:80]!r}", asker())

    sys.addaudithook(hook)
    return guard
