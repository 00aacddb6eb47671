"""The judge's snapshot of the functions it relies on, taken without importing torch._dynamo."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = r'''
import sys
import torch
from gpu_workers import measure
assert "torch._dynamo" not in sys.modules, "measure must not import dynamo (a second or two per child)"
import torch._dynamo  # what a candidate's torch.compile does: it rebinds torch.manual_seed
print("after dynamo:", measure.patched_attributes())
original = measure._ORIGINALS[(id(torch), "manual_seed")]
torch.manual_seed = torch._disable_dynamo(lambda seed: original(0))  # the same wrapper around another function
print("lookalike:", measure.patched_attributes())
'''


def test_dynamos_own_wrapper_is_no_patch_but_the_same_wrapper_round_another_function_is():
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert lines["after dynamo"] == "[]"
    assert "torch.manual_seed" in lines["lookalike"]
