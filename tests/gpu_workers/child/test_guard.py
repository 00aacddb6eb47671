"""The audit guard's frame rules, each in a fresh interpreter (an audit hook cannot be removed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

HARNESS = '''
import sys, types
from gpu_workers.child.guard import install, Blocked
import torch
guard = install()

def candidate(source):
    module = types.ModuleType("kernelcourt_candidate")
    module.__file__ = "<kernel>"
    try:
        exec(compile(source, "<kernel>", "exec"), module.__dict__)
        return "ok"
    except Blocked as exc:
        return f"Blocked: {exc}"

print(candidate(sys.argv[1]))
print("violations:", guard.violations)
'''


def _run(source: str) -> list[str]:
    done = subprocess.run([sys.executable, "-c", HARNESS, source], capture_output=True, text=True, cwd=REPO,
                          timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()


def test_library_code_that_keeps_its_frames_works():
    source = ("import logging, traceback, typing, collections, enum, warnings\n"
              "logging.getLogger('x').warning('w %s', 1)\n"
              "assert traceback.format_stack()\n"
              "try:\n    1 / 0\nexcept ZeroDivisionError:\n    assert 'ZeroDivisionError' in traceback.format_exc()\n"
              "T = typing.TypeVar('T')\nP = collections.namedtuple('P', 'a b')\nE = enum.Enum('E', 'A B')\n"
              "warnings.warn('x', stacklevel=2)\n")
    assert _run(source) == ["ok", "violations: []"]


def test_the_candidates_own_frame_reads_are_refused_as_its_own():
    assert _run("import sys\nsys._getframe(1)")[0] == "Blocked: the judge blocks sys._getframe in candidate code"
    assert _run("import inspect\ninspect.currentframe()")[0] == (
        "Blocked: the judge blocks sys._getframe in candidate code")
    assert _run("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    e.__traceback__.tb_frame")[0] == (
        "Blocked: the judge blocks access to tb_frame in candidate code")


def test_a_library_that_would_hand_frames_back_is_refused_and_named():
    # StackSummary.extract with capture_locals would repr the judge's locals: walk_stack(None) asks
    # for the frame itself, and its caller here is library code, not a consumer of frames
    out = _run("import traceback\ntraceback.StackSummary.extract(traceback.walk_stack(None), capture_locals=True)")
    assert out == ["Blocked: the judge blocks sys._getframe in library code (traceback.walk_stack)",
                   "violations: ['sys._getframe by library code (traceback.walk_stack)']"]


def test_a_forged_file_name_is_still_library_code_not_a_consumer():
    # code compiled under logging's file name is not logging's findCaller: the code object decides
    source = ("import logging, sys\n"
              "exec(compile('def findCaller():\\n    return sys._getframe(1)\\nfindCaller()', logging.__file__, "
              "'exec'), {'sys': sys, '__name__': 'logging'})\n")
    assert _run(source)[0] == "Blocked: the judge blocks sys._getframe in library code (logging.findCaller)"
