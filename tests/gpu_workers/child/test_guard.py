"""The audit guard's frame rules, each in a fresh interpreter (an audit hook cannot be removed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

HARNESS = '''
import sys, types
from gpu_workers.child.guard import install, Blocked
from gpu_workers.child.main import preload
import torch
preload("candidate")  # as the candidate child is, before its guard
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
    # for the frame itself, and its caller here is library code, not a consumer of frames; the refusal
    # names the library function that asked and the accessor it asked through
    out = _run("import traceback\ntraceback.StackSummary.extract(traceback.walk_stack(None), capture_locals=True)")
    who = "library code (traceback.StackSummary.extract.<locals>.extended_frame_gen, through traceback.walk_stack)"
    assert out == [f"Blocked: the judge blocks sys._getframe in {who}", f"violations: ['sys._getframe by {who}']"]


def test_a_forged_file_name_is_still_library_code_not_a_consumer():
    # code compiled under logging's file name is not logging's findCaller: the code object decides
    source = ("import logging, sys\n"
              "exec(compile('def findCaller():\\n    return sys._getframe(1)\\nfindCaller()', logging.__file__, "
              "'exec'), {'sys': sys, '__name__': 'logging'})\n")
    assert _run(source)[0] == "Blocked: the judge blocks sys._getframe in library code (logging.findCaller)"


def test_torch_jit_trace_works_in_candidate_code():
    # its first use imports sympy (preloaded) and registers operators, which record their caller's file
    # and line, and it names traced values after the caller's locals: frames read, none handed back
    source = ("import torch\nm = torch.nn.Linear(4, 4)\nx = torch.randn(2, 4)\n"
              "traced = torch.jit.trace(m, x)\nassert torch.equal(traced(x), m(x))\n")
    assert _run(source) == ["ok", "violations: []"]


def test_torch_compile_in_candidate_code_is_refused_as_the_librarys_request():
    # Dynamo reads the frames it compiles, and a callback of its own would be handed frames: refused,
    # and named as library code that asked (a failure of that call), not as the candidate's violation
    out = _run("import torch\ntorch.compile(torch.nn.Linear(4, 4))(torch.randn(2, 4))\n")
    assert out[0].startswith("Blocked: the judge blocks sys._getframe in library code ("), out
    assert out[1].startswith("violations: ['sys._getframe by library code ("), out
