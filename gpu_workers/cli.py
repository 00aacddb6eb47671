"""``python -m gpu_workers evaluate|evaluate-batch|redteam`` — the evaluator's command line (DESIGN.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .schema import EvalRequest, EvalResult


def _read(path: str, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SystemExit(f"error: {what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"error: cannot read {what} file {path}: {exc}") from None


def _load_json_arg(value: str | None, what: str) -> Any:
    if value is None:
        return None
    text = Path(value).read_text(encoding="utf-8") if Path(value).exists() else value
    try:
        return json.loads(text)
    except ValueError as exc:
        raise SystemExit(f"error: {what} is neither a JSON file nor JSON text: {exc}") from None


def _human(result: EvalResult) -> str:
    lines = [f"status: {result.status}   correct: {result.correct}   reward: {result.reward:g}"]
    if result.message:
        lines.append(f"message: {result.message}")
    t = result.timings_ms
    if t.get("kernel") is not None:
        parts = [f"{k} {v:.4g} ms" for k, v in t.items() if v is not None]
        lines.append("timings: " + ", ".join(parts))
        sp = [f"vs {k} {v:.3g}x" for k, v in result.speedup.items() if v is not None]
        if sp:
            lines.append("speedup: " + ", ".join(sp))
    for f in result.findings:
        lines.append(f"[{f.severity}] {f.rule}: {f.message}")
    return "\n".join(lines)


def _request_from(args: argparse.Namespace, task: str, kernel: str, name: str = "") -> EvalRequest:
    return EvalRequest(
        task_source=task, kernel_source=kernel, device=args.device, track=args.track, task_name=name,
        profile=args.profile, trials=args.trials, atol=args.atol, rtol=args.rtol,
        baselines=tuple(args.baselines.split(",")) if args.baselines else ("eager", "compile"),
        timing_budget_s=args.timing_budget, compile_timeout_s=args.compile_timeout,
        run_timeout_s=args.run_timeout, memory_limit_mb=args.memory_mb, max_elements=args.max_elements,
        rule_set=_load_json_arg(args.rule_set, "--rule-set"),
        reward_config=_load_json_arg(args.reward, "--reward") if args.reward and args.reward.strip().startswith(("{", "/", ".")) else args.reward,
    )


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--track", choices=["strict", "open"], default="strict")
    p.add_argument("--profile", default=None, help="task size profile (default: the device's)")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--atol", type=float, default=1e-2)
    p.add_argument("--rtol", type=float, default=1e-2)
    p.add_argument("--baselines", default=None, help="comma list: eager,compile,compile_reduce_overhead,"
                   "compile_max_autotune,cuda_graph (default eager,compile)")
    p.add_argument("--timing-budget", type=float, default=2.0, help="seconds per timed callable")
    p.add_argument("--compile-timeout", type=float, default=900.0)
    p.add_argument("--run-timeout", type=float, default=300.0)
    p.add_argument("--memory-mb", type=int, default=None,
                   help="each child's memory limit (default: from the task's own bytes)")
    p.add_argument("--max-elements", type=int, default=None,
                   help="scale the task's size constants down until no input, output or parameter has "
                        "more elements (the task file is untouched)")
    p.add_argument("--rule-set", default=None, help="a rule set as a JSON file or JSON text")
    p.add_argument("--reward", default=None, help="reward config name or JSON")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_workers", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="evaluate one kernel against one task")
    ev.add_argument("--task", required=True)
    ev.add_argument("--kernel", required=True)
    ev.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    _add_common(ev)
    batch = sub.add_parser("evaluate-batch", help="evaluate a JSONL manifest of {task, kernel} rows")
    batch.add_argument("manifest")
    batch.add_argument("--out", default="-", help="JSONL results (default stdout)")
    batch.add_argument("--workers", type=int, default=1)
    batch.add_argument("--processes", type=int, default=1,
                       help="worker processes to spread the workers over (default 1: threads of this process)")
    batch.add_argument("--gpus", type=int, default=0)
    _add_common(batch)
    sub.add_parser("redteam", add_help=False, help="attack the evaluator with an OpenAI-compatible model "
                   "(python -m agent redteam; --help there)")
    if argv is None:
        argv = sys.argv[1:]
    if argv[:1] == ["redteam"]:
        return _redteam(argv[1:])
    args = parser.parse_args(argv)

    from .tasks import TaskError

    if args.command == "evaluate":
        task, kernel = _read(args.task, "task"), _read(args.kernel, "kernel")
        try:
            request = _request_from(args, task, kernel, Path(args.task).stem)
            from .evaluator import evaluate

            result = evaluate(request)
        except (TaskError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(result.to_dict()))
        else:
            print(_human(result))
        return 0
    return _batch(args)


def _redteam(argv: list[str]) -> int:
    """The red-team harness drives a model through the agent's client, and the evaluator never
    imports the agent (tests/test_import_contract.py): it runs as ``python -m agent redteam``, in a
    process of its own, with the same arguments."""
    import subprocess

    return subprocess.run([sys.executable, "-m", "agent", "redteam", *argv], check=False).returncode


def _batch(args: argparse.Namespace) -> int:
    from .workers.pool import LocalPool

    manifest = Path(args.manifest)
    if not manifest.exists():
        print(f"error: manifest not found: {manifest}", file=sys.stderr)
        return 2
    rows: list[tuple[int, dict[str, Any]]] = []
    problems: list[str] = []
    for number, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or "task" not in row or "kernel" not in row:
                raise ValueError("needs 'task' and 'kernel' paths")
            rows.append((number, row))
        except ValueError as exc:
            problems.append(f"line {number}: {exc}")
    for p in problems:
        print(f"skipped {p}", file=sys.stderr)
    base = manifest.parent
    requests, labels = [], []
    for number, row in rows:
        task = _read(str(base / row["task"]), "task")
        kernel = _read(str(base / row["kernel"]), "kernel")
        requests.append(_request_from(args, task, kernel, Path(row["task"]).stem))
        labels.append({"line": number, "task": row["task"], "kernel": row["kernel"], "id": row.get("id")})
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")  # noqa: SIM115
    from tqdm import tqdm

    bar = tqdm(total=len(requests), file=sys.stderr, unit="kernel")
    with LocalPool(workers=args.workers, gpus=args.gpus, processes=args.processes) as pool:
        for index, result in pool.as_completed(requests):
            out.write(json.dumps({**labels[index], **result.to_dict()}) + "\n")
            out.flush()
            bar.update(1)
            bar.set_postfix_str(result.status)
    bar.close()
    if out is not sys.stdout:
        out.close()
    return 0
