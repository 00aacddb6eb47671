"""Crashes, hangs, early exits, memory bombs, bad files and the command line.

Each fault costs one evaluation and never the evaluator: they all run in this process through
``evaluate()``, and afterwards this process must have no children left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpu_workers import EvalRequest, EvalResult, evaluate
from gpu_workers.sandbox import keeper, refpool, zygote
from gpu_workers.tasks import TaskError
from gpu_workers.workers.pool import LocalPool

HACKS = Path(__file__).resolve().parent / "hacks"
FAULTS = HACKS / "faults"
TASK = HACKS / "tasks" / "scale_relu.py"
REPO_ROOT = Path(__file__).resolve().parents[2]
CLI_FLAGS = ["--track", "open", "--baselines", "eager", "--timing-budget", "0.2"]


def _request(kernel: str, **overrides) -> EvalRequest:
    fields = dict(
        task_source=TASK.read_text(),
        kernel_source=(FAULTS / kernel).read_text(),
        device="cpu",
        track="open",
        baselines=("eager",),
        timing_budget_s=0.2,
        trials=5,
        run_timeout_s=60.0,
    )
    fields.update(overrides)
    return EvalRequest(**fields)


# Faults that run a child: evaluated together, two at a time, once for the module.
RUNNING_FAULTS = {
    "hang": _request("hang.py", run_timeout_s=20.0),
    "segfault": _request("segfault.py"),
    "os_exit": _request("os_exit.py"),
    "sys_exit": _request("sys_exit.py"),
    "init_raises": _request("init_raises.py"),
    "memory_bomb": _request("memory_bomb.py", memory_limit_mb=2048),
}


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _children_of_this_process() -> set[int]:
    """Evaluation processes still running: every process below this one but its zygotes, the
    reference children kept for the next evaluation, and those children's keepers."""
    kept = {z.proc.pid for z in zygote.running()} | refpool.idle_pids()
    kept |= {_parent(pid) for pid in refpool.idle_pids()}
    return {pid for pid in keeper.descendants(os.getpid()) if keeper.running(pid)} - kept


@pytest.fixture(scope="module")
def fault_results(kernelcourt_cache_dir) -> dict[str, EvalResult]:
    before = _children_of_this_process()
    with LocalPool(workers=2) as pool:
        futures = {name: pool.submit(request) for name, request in RUNNING_FAULTS.items()}
        results = {name: future.result() for name, future in futures.items()}
    results["_leftover_children"] = _children_of_this_process() - before  # type: ignore[assignment]
    results["_zygotes_alive"] = [z.alive for z in zygote.running()]  # type: ignore[assignment]
    return results


def test_no_child_outlives_its_evaluation(fault_results):
    assert fault_results["_leftover_children"] == set()


def test_faulting_children_leave_the_zygote_running(fault_results):
    # one zygote per import-time environment (a CPU child's starts with its heap tunables): all still up
    alive = fault_results["_zygotes_alive"]
    assert alive and all(alive), alive


def test_hang_in_forward_is_a_timeout(fault_results):
    result = fault_results["hang"]
    assert result.status == "timeout", result.message
    assert "20 s" in result.message
    assert result.reward == -1.0


def test_segfault_is_a_runtime_error_naming_the_signal(fault_results):
    result = fault_results["segfault"]
    assert result.status == "runtime_error", result.message
    assert "SIGSEGV" in result.message


def test_os_exit_zero_inside_forward_is_a_failure(fault_results):
    result = fault_results["os_exit"]
    assert result.status == "runtime_error", result.message
    assert "code 0" in result.message
    assert result.reward == -1.0


def test_sys_exit_inside_forward_is_a_failure(fault_results):
    result = fault_results["sys_exit"]
    assert result.status == "runtime_error", result.message
    assert "SystemExit" in result.message or "code 0" in result.message
    assert result.reward == -1.0


def test_exception_in_constructor_is_a_runtime_error(fault_results):
    result = fault_results["init_raises"]
    assert result.status == "runtime_error", result.message
    assert "construct" in result.message
    assert "constructor refuses" in result.message + result.run_log


def test_memory_bomb_is_stopped_by_the_limit(fault_results):
    result = fault_results["memory_bomb"]
    assert result.status == "runtime_error", result.message
    text = (result.message + result.run_log).lower()
    assert "memory" in text or "allocate" in text, result.message
    # the limit is what stopped it, not an import failure: the candidate reached forward
    assert "forward" in result.message or "memory limit" in result.message, result.message


def test_the_compile_child_runs_below_the_rest_of_the_evaluation_and_children_inherit_a_frozen_heap(monkeypatch):
    monkeypatch.setenv("KERNELCOURT_COMPILE_NICE", "7")
    # a source never compiled before (a kept cache would skip the compile child)
    source = (FAULTS / "reports_process.py").read_text() + f"\n# run {time.time_ns()}\n"
    result = evaluate(_request("reports_process.py", kernel_source=source, trials=2, timing_budget_s=0.05))
    assert result.status == "passed", result.message
    base = os.getpriority(os.PRIO_PROCESS, 0)
    assert f"module run at niceness {min(base + 7, 19)}" in result.compile_log  # and the compilers it starts
    assert f"module run at niceness {base}" in result.run_log  # the candidate child, which times, is not lowered
    assert result.timing_stats["cpu_s"]["compile"] > 0  # the compile child's CPU, counted
    # what the zygote imported is frozen: a child's collections never walk (or copy) it
    frozen = [int(line.rsplit(" ", 1)[1]) for line in result.run_log.splitlines() if "frozen objects:" in line]
    assert frozen and frozen[0] > 10_000, result.run_log[-2000:]


def test_syntax_error_is_a_compile_error_with_the_line():
    result = evaluate(_request("syntax_error.py"))
    assert result.status == "compile_error"
    assert "not valid Python" in result.message and "line 6" in result.message
    assert result.reward == -1.0


def test_missing_model_new_is_a_compile_error_naming_it():
    result = evaluate(_request("no_model_new.py"))
    assert result.status == "compile_error"
    assert "ModelNew" in result.message


def test_task_without_get_inputs_raises_task_error_naming_it():
    request = _request("os_exit.py", task_source=(FAULTS / "task_without_get_inputs.py").read_text())
    with pytest.raises(TaskError, match="get_inputs"):
        evaluate(request)


# ---- the command line -------------------------------------------------------------------------
def _cli(*args: str, timeout: float = 300.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gpu_workers", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )


def test_cli_json_is_one_object_even_when_the_candidate_prints_a_verdict():
    done = _cli(
        "evaluate", "--task", str(TASK), "--kernel", str(FAULTS / "fake_verdict.py"), *CLI_FLAGS, "--json"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    verdict = json.loads(done.stdout)  # exactly one JSON document: anything else raises
    assert isinstance(verdict, dict)
    assert done.stdout.strip().count("\n") == 0
    assert verdict["status"] == "incorrect"
    assert verdict["reward"] == -1.0
    assert set(verdict) >= {"status", "correct", "findings", "reward", "timings_ms", "speedup"}


def test_cli_missing_file_exits_non_zero_with_a_clear_message():
    done = _cli(
        "evaluate", "--task", str(TASK), "--kernel", str(FAULTS / "no_such_kernel.py"), *CLI_FLAGS, "--json"
    )
    assert done.returncode != 0
    assert "not found" in done.stderr and "no_such_kernel.py" in done.stderr
    assert done.stdout == ""


def test_cli_batch_writes_one_jsonl_row_per_kernel_with_progress(tmp_path):
    manifest = tmp_path / "batch.jsonl"
    rows = [
        {"id": "honest", "task": str(TASK), "kernel": str(HACKS / "kernels" / "honest_scale_relu.py")},
        {
            "id": "zeros",
            "task": str(HACKS / "tasks" / "tiny_tanh.py"),
            "kernel": str(HACKS / "kernels" / "f12_zeros.py"),
        },
        {"id": "syntax", "task": str(TASK), "kernel": str(FAULTS / "syntax_error.py")},
    ]
    manifest.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "results.jsonl"
    done = _cli("evaluate-batch", str(manifest), "--out", str(out), "--workers", "2", *CLI_FLAGS)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = out.read_text().splitlines()
    assert len(lines) == 3
    by_id = {row["id"]: row for row in map(json.loads, lines)}
    assert {k: v["status"] for k, v in by_id.items()} == {
        "honest": "passed",
        "zeros": "incorrect",
        "syntax": "compile_error",
    }
    assert "3/3" in done.stderr  # tqdm's bar counts to 3 on stderr


def test_candidate_cannot_kill_the_evaluator():
    # The candidate's child runs as the same user as the evaluator and knows its pid (getppid).
    done = _cli(
        "evaluate", "--task", str(TASK), "--kernel", str(FAULTS / "kill_parent.py"), *CLI_FLAGS, "--json"
    )
    assert done.returncode == 0, f"the evaluator died (exit {done.returncode}): {done.stderr[-1000:]}"
    verdict = json.loads(done.stdout)
    assert verdict["status"] != "passed"


# Takes the batons it is given on live locks, as a compile child's build does, says so, and holds
# them until it is killed.
_BATON_HOLDER = """
import sys
from gpu_workers.build.baton import LiveBaton
batons = [LiveBaton(path) for path in sys.argv[1:]]
assert all(b.try_acquire() for b in batons)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_build_whose_holder_was_killed_does_not_hold_back_the_next_evaluation():
    """torch's load_inline waits for its build folder's `lock` file to go; a pool process killed
    mid-build leaves it. The baton is a live lock: the next build takes it over from the dead."""
    from gpu_workers.build.baton import LiveBaton
    from gpu_workers.build.compile import build_context
    from gpu_workers.hardware import hardware_info
    from gpu_workers.suite import list_tasks

    silu = next(t for t in list_tasks() if t.name == "silu")
    request = EvalRequest(task_source=silu.task_source, kernel_source=silu.cpu_kernel_source, device="cpu",
                          baselines=("eager",), timing_budget_s=0.2, compile_timeout_s=240, run_timeout_s=240)
    assert evaluate(request).status == "passed"  # built (or found built)
    ext_dir = build_context(request, hardware_info("cpu")).ext_dir
    batons = [p.parent / "lock" for p in ext_dir.rglob("build.ninja")]
    assert batons
    # given a process that holds every build folder's baton of this source, SIGKILLed while it does
    holder = subprocess.Popen([sys.executable, "-c", _BATON_HOLDER, *map(str, batons)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert holder.stdout.readline() == "held\n"
    holder.kill()
    holder.wait()
    assert all(b.exists() and not LiveBaton(str(b)).held() for b in batons)

    # when the same source is evaluated again
    result = evaluate(request)

    # then its build took the dead holder's baton over instead of waiting for it
    assert result.status == "passed", (result.message, result.compile_log[-1500:], result.run_log[-1500:])
    logs = result.compile_log + result.run_log
    assert f"took over a build lock whose holder is gone (process {holder.pid})" in logs
    assert not all(b.exists() for b in batons)
