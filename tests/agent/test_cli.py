"""The command line end to end: a subprocess against the scripted server and the real evaluator."""

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

from scripted_llm import TASKS, kernel_reply, reply

REPO = Path(__file__).resolve().parents[2]
TORCH_KERNEL = (Path(__file__).resolve().parent / "kernels" / "torch_relu_add.py").read_text()


def _run(*args, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("OPENAI_API_KEY", None)
    env.pop("KERNELCOURT_LLM_API_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "agent", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_runs_a_rollout_and_prints_json_events_and_a_summary(openai_server, tmp_path):
    server = openai_server([reply("Thinking, no code yet."), reply(kernel_reply(TORCH_KERNEL))])
    variants = tmp_path / "variants.jsonl"
    variants.write_text(json.dumps({"source": "OLD_VARIANT = 1", "speedup": 1.7}) + "\n")

    done = _run(
        "run",
        "--task",
        str(TASKS / "relu_add.py"),
        "--base-url",
        server.url,
        "--model",
        "scripted",
        "--track",
        "open",
        "--device",
        "cpu",
        "--max-turns",
        "4",
        "--trials",
        "2",
        "--json",
        "--contrastive-file",
        str(variants),
        "--baselines",
        "eager",
        "--first-pass",
    )

    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    events, final = lines[:-1], lines[-1]
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert [e["kind"] for e in events] == [
        "system",
        "user",
        "assistant",
        "observation",
        "assistant",
        "tool_call",
        "evaluation",
        "observation",
        "summary",
    ]
    assert set(final) == {"summary"}
    summary = final["summary"]
    assert (summary["stop_reason"], summary["turns"], summary["evaluations"]) == ("success", 2, 1)
    assert summary["best_kernel"] == TORCH_KERNEL.rstrip() + "\n"
    assert summary["best_evaluation"]["status"] == "passed"
    assert summary["task_name"] == "relu_add"
    assert (
        "### Variant 1: speedup 1.70x\n```python\nOLD_VARIANT = 1\n```"
        in server.requests[0]["messages"][1]["content"]
    )
    assert server.requests[0]["model"] == "scripted"


def test_cli_missing_task_file_exits_2_with_a_clear_message(tmp_path):
    done = _run(
        "run", "--task", str(tmp_path / "nope.py"), "--base-url", "http://127.0.0.1:9/v1", "--model", "m"
    )

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(
        f"error: cannot read task file {tmp_path / 'nope.py'}: No such file or directory"
    )


def test_cli_bad_url_and_missing_arguments_exit_2():
    bad_url = _run(
        "run", "--task", str(TASKS / "relu_add.py"), "--base-url", "localhost:8000", "--model", "m"
    )
    missing = _run("run", "--task", str(TASKS / "relu_add.py"))

    assert bad_url.returncode == 2
    assert bad_url.stderr == "error: --base-url must be an http(s) URL, got 'localhost:8000'\n"
    assert missing.returncode == 2
    assert "the following arguments are required: --base-url, --model" in missing.stderr


def test_cli_unreachable_endpoint_exits_3_with_a_clear_message():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    done = _run(
        "run",
        "--task",
        str(TASKS / "relu_add.py"),
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
        "--model",
        "m",
        "--retries",
        "0",
        "--json",
    )

    assert done.returncode == 3
    assert done.stderr.startswith(
        f"error: the model endpoint failed: LLMConnectionError: cannot reach http://127.0.0.1:{port}/v1/chat/completions"
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e.get("kind") for e in lines[:-1]] == ["system", "user", "error", "summary"]
    assert lines[-1]["summary"]["stop_reason"] == "llm_error"


def test_cli_without_json_prints_readable_lines_and_a_headline(openai_server):
    server = openai_server([reply("Still thinking.")])

    done = _run(
        "run",
        "--task",
        str(TASKS / "relu_add.py"),
        "--base-url",
        server.url,
        "--model",
        "m",
        "--max-turns",
        "1",
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[2] == "[2] turn 1 assistant (20 tokens): Still thinking."
    assert lines[3] == (
        "[3] turn 1 observation: No candidate found: reply with one fenced ```python block containing the complete "
        "file that defines"
    )
    assert re.fullmatch(
        r"rollout [0-9a-f]{32}: max_turns after 1 turns, 0 evaluations, 120 tokens, [0-9.]+s; no passing kernel",
        lines[-1],
    )
