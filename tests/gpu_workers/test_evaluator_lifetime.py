"""A hostile kernel costs exactly one evaluation: its GPU holds are bounded, the processes it starts
are counted from import to exit and die with it, and nothing of it stays in the temp folder.

Real evaluations on the CPU (the GPU slot is one lock per host there, as it is one per GPU on CUDA),
real processes, the candidates written for each case.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from gpu_workers import EvalRequest, evaluate
from gpu_workers.sandbox import keeper
from gpu_workers.suite import list_tasks
from gpu_workers.workers.pool import LocalPool

REPO_ROOT = Path(__file__).resolve().parents[2]

HONEST = '''
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
'''

# Its first call (the warm-up) says so in its own folder, then never returns.
SPINNER = '''
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        open("spinning", "w").close()
        while True:
            pass
'''

# Its warm-up call forks a helper that stays (as deferred work would), then computes honestly. The
# process calls are spelt so that the static scan does not see them: the mechanism must.
FORKS_IN_WARM_UP = '''
import os
import time

import torch

fork, leave = getattr(os, "fo" + "rk"), getattr(os, "_ex" + "it")
helpers = []


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        if not helpers:
            helpers.append(fork())
            if helpers[0] == 0:
                time.sleep(600)
                leave(0)
        return x * torch.sigmoid(x)
'''

# Its import leaves a daemon: fork, setsid, fork again (out of the child's group and session), the
# grandchild's pid printed to the child's log, its parent gone at once.
DAEMON_AT_IMPORT = '''
import os
import time

import torch

fork, leave, session = getattr(os, "fo" + "rk"), getattr(os, "_ex" + "it"), getattr(os, "set" + "sid")
read_end, write_end = os.pipe()
if fork() == 0:
    session()
    if fork() == 0:
        os.write(write_end, f"{os.getpid()}\\n".encode())
        time.sleep(600)
    leave(0)
os.close(write_end)
print("DAEMON", os.read(read_end, 64).decode().strip(), flush=True)
os.wait()


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
'''

CRASHES = '''
import os

import torch


class ModelNew(torch.nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        getattr(os, "ab" + "ort")()
'''


def _silu() -> str:
    return next(t for t in list_tasks() if t.name == "silu").task_source


def _request(kernel: str, **fields) -> EvalRequest:
    fields = {"device": "cpu", "track": "open", "baselines": ("eager",), "timing_budget_s": 0.2,
              "compile_timeout_s": 120.0, "run_timeout_s": 120.0, "trials": 2, **fields}
    return EvalRequest(task_source=_silu(), kernel_source=kernel, **fields)


def test_a_candidate_spinning_in_forward_is_killed_at_its_bound_and_its_neighbour_passes(tmp_path, monkeypatch):
    # given a 2-worker pool, a stretch floor well below the run's time limit, and the children's
    # folders where the test can see them
    monkeypatch.setenv("KERNELCOURT_GPU_HOLD_FLOOR_S", "20")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    hostile_request = _request(SPINNER)
    with LocalPool(workers=2) as pool:
        # when the spinner holds the slot (shared) in its warm-up call, an honest neighbour arrives,
        # whose baseline and own timing need the slot alone
        hostile = pool.submit(hostile_request)
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob("kc-candidate-*/spinning")):
            assert time.monotonic() < deadline and not hostile.done(), "the spinner never started spinning"
            time.sleep(0.05)
        honest = pool.submit(_request(HONEST)).result()
        spun = hostile.result()

    # then the spinner alone pays: killed at the bound of its warm-up stretch, well inside its run's limit
    assert spun.status == "timeout", spun.message
    overrun = spun.timing_stats["gpu_slot"]["overrun"]
    assert (overrun["after"], overrun["ends"], overrun["alone"]) == ("built", "ready", False)
    assert overrun["bound_s"] < hostile_request.run_timeout_s
    assert "held the GPU for more than" in spun.message and "'built'" in spun.message
    # and the neighbour passed, having waited as a timer for less than the spinner's run limit
    assert honest.status == "passed", honest.message
    assert honest.timing_stats["gpu_slot"]["exclusive_wait_s"] < hostile_request.run_timeout_s


def test_a_kernel_that_forks_in_its_warm_up_call_gets_a_reject_finding():
    # given a candidate whose first call leaves a process running
    result = evaluate(_request(FORKS_IN_WARM_UP))

    # then the process is counted (outside the trials' own calls) and rejects the kernel
    assert result.status == "rejected", result.message
    finding = next(f for f in result.findings if f.rule == "spawned_threads")
    assert finding.severity == "reject" and finding.family == 6
    assert "1 process(es)" in finding.message and "'ready'" in finding.message


@pytest.mark.parametrize("zygote", ["1", "0"])
def test_a_setsid_grandchild_does_not_outlive_the_evaluation(zygote, monkeypatch):
    # given a candidate whose import leaves a daemon in its own session (a group kill misses it),
    # with children forked from the zygote or started with python -m
    monkeypatch.setenv("KERNELCOURT_ZYGOTE", zygote)

    # when it is evaluated
    result = evaluate(_request(DAEMON_AT_IMPORT))

    # then the daemon was counted, and it is gone once the evaluation has returned
    found = re.search(r"DAEMON (\d+)", result.run_log)
    assert found, result.run_log[-2000:]
    assert not keeper.running(int(found.group(1)))
    assert result.status == "rejected", result.message
    assert any(f.rule == "spawned_threads" and "'imported'" in f.message for f in result.findings)


_EVALUATE_ALL = textwrap.dedent('''
    import json, os, sys
    from gpu_workers import EvalRequest, evaluate
    from gpu_workers.build.compile import _spares
    from gpu_workers.sandbox import refpool, zygote
    from gpu_workers.suite import list_tasks

    task = next(t for t in list_tasks() if t.name == "silu").task_source
    seen = []
    for kernel, timeout in json.loads(sys.argv[1]):
        result = evaluate(EvalRequest(task_source=task, kernel_source=kernel, device="cpu", track="open",
                                      baselines=("eager",), timing_budget_s=0.2, trials=2,
                                      compile_timeout_s=120.0, run_timeout_s=timeout))
        held = {str(z.workdir) for z in zygote.running()} | {str(c.workdir) for _, c in _spares}
        held |= {str(c.workdir) for idle in refpool._IDLE.values() for c in idle}
        left = {os.path.join(os.environ["TMPDIR"], name) for name in os.listdir(os.environ["TMPDIR"])}
        seen.append({"status": result.status, "left": sorted(left - held), "zygotes": [z.proc.pid for z in zygote.running()]})
    print(json.dumps(seen), flush=True)
    os._exit(0)  # as a pool process ends: no atexit, no close of the zygote or the kept children
''')


def test_nothing_of_an_evaluation_stays_in_the_temp_folder(tmp_path):
    # given a worker process with a fresh temp folder that evaluates an honest, a crashing and a
    # timed-out candidate (a spinner given 20 s) and then ends without its exit handlers
    temp = tmp_path / "tmp"
    temp.mkdir()
    cases = [[HONEST, 120.0], [CRASHES, 120.0], [SPINNER, 20.0]]
    env = {**os.environ, "TMPDIR": str(temp), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", _EVALUATE_ALL, json.dumps(cases)], env=env,
                          capture_output=True, text=True, timeout=540, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    # then after each evaluation only what long-lived processes hold is there
    assert [s["status"] for s in seen] == ["passed", "runtime_error", "timeout"]
    assert [s["left"] for s in seen] == [[], [], []]
    # and once the worker is gone its zygote, its kept children and their keepers remove the rest
    deadline = time.monotonic() + 60
    while any(keeper.running(pid) for pid in seen[-1]["zygotes"]) or os.listdir(temp):
        assert time.monotonic() < deadline, os.listdir(temp)
        time.sleep(0.1)
    assert os.listdir(temp) == []
