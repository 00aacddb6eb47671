"""Which writes CUDA needs under the candidate children's Landlock confinement (``gpu_workers.child.confine``).

For each case a fresh process confines itself to writing beneath its own folder, ``/dev`` and the
case's extra folders, either before CUDA is initialised or after, then initialises CUDA (if not yet)
and does what a candidate child does: allocate, run kernels, pinned host memory, events, the timer's
spin and its context flags. One line per case: what worked, or the first error.

    python bench/confine_cuda.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
when, extra = sys.argv[2], json.loads(sys.argv[3])
from gpu_workers.child import confine
steps = []
def confine_now():
    steps.append(confine.confine_writes([os.getcwd(), "/dev", *extra]).split(":")[0])
try:
    if when == "before":
        confine_now()
    import torch
    torch.cuda.init(); torch.cuda.set_device(0); steps.append("init")
    if when == "after":
        confine_now()
    x = torch.randn(1 << 20, device="cuda"); y = (x * 2).sum(); torch.cuda.synchronize(); steps.append("kernel")
    big = torch.empty(1 << 28, device="cuda"); big.fill_(1.0); del big; steps.append("1GiB")
    pinned = torch.empty(1 << 20, pin_memory=True); pinned.copy_(x.cpu()); steps.append("pinned")
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); torch.cuda._sleep(1000); b.record(); b.synchronize(); a.elapsed_time(b); steps.append("events")
    from gpu_workers.child import timinghost
    with timinghost.SpinWaits(torch.device("cuda")) as waits:
        torch.cuda.synchronize()
    steps.append(f"waits={waits.mode}")
    print(json.dumps({"ok": True, "steps": steps}))
except BaseException as exc:
    print(json.dumps({"ok": False, "steps": steps, "error": f"{type(exc).__name__}: {exc}"[:300]}))
'''

CASES = [("before", []), ("before", ["/proc"]), ("before", ["/sys"]), ("before", ["/tmp"]), ("before", ["/run"]),
         ("before", ["/var"]), ("before", ["/"]), ("after", []), ("never", [])]


def main() -> int:
    for when, extra in CASES:
        with tempfile.TemporaryDirectory(prefix="ka-confine-") as folder:
            env = {**os.environ, "HOME": folder, "TMPDIR": folder}
            if when == "before" and not extra and shutil.which("strace"):  # the refused calls, named
                traced = subprocess.run(["strace", "-f", "-qq", "-e", "trace=%file,%desc", "-Z", sys.executable, "-c",
                                         PROBE, str(ROOT), when, "[]"], cwd=folder, env=env, capture_output=True,
                                        text=True, timeout=180, check=False)
                print("refused system calls:\n  " + "\n  ".join(traced.stderr.splitlines()[-30:]), flush=True)
            done = subprocess.run([sys.executable, "-c", PROBE, str(ROOT), when, json.dumps(extra)], cwd=folder,
                                  env=env, capture_output=True, text=True, timeout=180, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            report = json.loads(lines[-1]) if lines else {"ok": False, "error": done.stderr[-300:]}
            print(f"confined {when} CUDA init, extra {extra or 'none'}: "
                  f"{'works' if report['ok'] else 'FAILS: ' + report.get('error', '?')} (steps {report.get('steps')})",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
