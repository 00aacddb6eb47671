"""Candidate code writes only beneath its own folders (Landlock), in the compile child and in the
candidate child alike; the shared cache (other builds, kept timings, the reference's caches) is out of
its reach."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpu_workers import EvalRequest, evaluate
from gpu_workers.child import confine

ROOT = Path(__file__).resolve().parents[2]
TASKS = Path(__file__).resolve().parent / "hacks" / "tasks"

pytestmark = pytest.mark.skipif(confine.abi_version() == 0, reason="this kernel has no Landlock")

# Mentions ctypes, so it gets a compile phase too: its module runs in the compile child first.
WRITER = '''
import os
import ctypes  # noqa: F401 - a build marker: this module also runs in a compile child
import torch
import torch.nn as nn

TARGET = {target!r}


def _try_writes(where):
    shared = os.environ.get("KERNELCOURT_CACHE_DIR", TARGET)
    for name in (os.path.join(TARGET, f"{{where}}-{{os.getpid()}}"), os.path.join(shared, f"poison-{{where}}"),
                 os.path.join(shared, "candidates", "another-candidate", f"poison-{{where}}")):
        try:
            with open(name, "w") as out:
                out.write("written by candidate code")
        except OSError:
            pass
    for folder in (os.getcwd(), os.environ.get("TRITON_CACHE_DIR", os.getcwd())):  # its own folder and its own compiler cache stay writable
        try:
            with open(os.path.join(folder, "scratch"), "w") as out:
                out.write("ok")
        except OSError as exc:
            raise RuntimeError(f"{{folder}} was not writable: {{exc}}") from exc


_try_writes("import")


class ModelNew(nn.Module):
    def forward(self, x):
        _try_writes("forward")
        return torch.relu(x * 1.5 + 0.25)
'''


def test_a_confined_process_writes_only_beneath_its_folders_and_so_do_its_threads_and_children(tmp_path):
    mine, other = tmp_path / "mine", tmp_path / "other"
    mine.mkdir()
    other.mkdir()
    kept = other / "kept.json"
    kept.write_text("as it was")
    probe = textwrap.dedent(f"""
        import subprocess, threading
        from gpu_workers.child import confine
        print(confine.confine_writes([{str(mine)!r}]))
        open({str(mine / "a")!r}, "w").write("x")
        for target in ({str(other / "b")!r},):
            try:
                open(target, "w")
                print("wrote", target)
            except PermissionError:
                print("refused")
        def thread():
            try:
                open({str(other / "c")!r}, "w")
                print("thread wrote")
            except PermissionError:
                print("thread refused")
        t = threading.Thread(target=thread); t.start(); t.join()
        done = subprocess.run(["sh", "-c", "echo x > {other / 'd'}"], capture_output=True)
        print("child refused" if done.returncode else "child wrote")
        import os
        try:  # a hard link into its own folder, then a write through it
            os.link({str(kept)!r}, {str(mine / "hard")!r})
            open({str(mine / "hard")!r}, "w").write("changed")
            print("wrote through a hard link")
        except OSError:
            print("link refused")
        os.symlink({str(kept)!r}, {str(mine / "soft")!r})
        try:
            open({str(mine / "soft")!r}, "w").write("changed")
            print("wrote through a symlink")
        except OSError:
            print("symlink refused")
        print(open("/etc/hostname").read() != "")  # reading is untouched
    """)
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("confined (Landlock ABI"), lines
    assert lines[1:] == ["refused", "thread refused", "child refused", "link refused", "symlink refused", "True"]
    assert (mine / "a").exists() and [p.name for p in other.iterdir()] == ["kept.json"]
    assert kept.read_text() == "as it was"


def _writer_request(target: Path) -> EvalRequest:
    return EvalRequest(task_source=(TASKS / "scale_relu.py").read_text(),
                       kernel_source=WRITER.format(target=str(target)), device="cpu", track="open",
                       baselines=("eager",), timing_budget_s=0.1, trials=2, run_timeout_s=120.0)


def test_candidate_code_cannot_write_outside_its_own_folders(tmp_path, monkeypatch, kernelcourt_cache_dir):
    target = tmp_path / "outside"
    target.mkdir()
    neighbour = kernelcourt_cache_dir / "candidates" / "another-candidate"  # another source's compiler caches
    neighbour.mkdir(parents=True, exist_ok=True)
    request = _writer_request(target)
    result = evaluate(request)
    assert result.status == "passed", result.message  # its own folders were writable, the rest refused quietly
    assert not list(target.iterdir())
    assert not list(kernelcourt_cache_dir.glob("poison-*")) and not list(neighbour.iterdir())
    own = kernelcourt_cache_dir / "candidates" / request.kernel_hash[:24]  # this source's compiler caches
    assert (own / "triton" / "scratch").read_text() == "ok"
    assert "[kernelcourt] confined (Landlock ABI" in result.compile_log + result.run_log

    # the same candidate unconfined: the writes land (what the confinement is what stops)
    monkeypatch.setenv("KERNELCOURT_CONFINE", "0")
    other = tmp_path / "outside-unconfined"
    other.mkdir()
    result = evaluate(_writer_request(other))
    assert result.status == "passed", result.message
    written = {p.name.split("-")[0] for p in other.iterdir()}
    assert written == {"import", "forward"}  # the compile child and the candidate child both wrote
    for poison in [*kernelcourt_cache_dir.glob("poison-*"), *neighbour.glob("poison-*")]:
        poison.unlink()
