"""``python -m agent run --task T.py --base-url URL --model NAME …``: one rollout from a terminal.

Exit status: 0 when the rollout ran (whatever its stop reason), 2 for usage errors and unreadable
files, 3 when the model endpoint failed (unreachable, HTTP errors after retries).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO
from urllib.parse import urlparse

from agent.events import JsonlSink, TrajectoryEvent
from agent.loop import RolloutConfig, run_rollout, summary_json

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_LLM = 3


class TextSink:
    """Human-readable one line per event (the default without --json)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def emit(self, event: TrajectoryEvent) -> None:
        if event.kind in ("system", "user"):
            line = f"[{event.seq}] {event.kind}: {len(event.content)} characters"
        elif event.kind == "assistant":
            first = (event.content.strip().splitlines() or [""])[0][:100].rstrip()
            line = f"[{event.seq}] turn {event.turn} assistant ({event.completion_tokens} tokens): {first}"
        elif event.kind == "tool_call":
            line = f"[{event.seq}] turn {event.turn} {event.tool_call['name'] if event.tool_call else '?'}"
        elif event.kind == "evaluation":
            ev = event.evaluation or {}
            speed = (ev.get("speedup") or {}).get("eager")
            speed_text = f" {speed:.3g}x" if isinstance(speed, int | float) else ""
            line = f"[{event.seq}] turn {event.turn} evaluation: {ev.get('status')}{speed_text} reward {event.reward}"
        elif event.kind == "observation":
            first = (event.content.strip().splitlines() or [""])[0][:100].rstrip()
            line = f"[{event.seq}] turn {event.turn} observation: {first}"
        else:
            line = f"[{event.seq}] {event.kind}: {event.content}"
        self.stream.write(line + "\n")
        self.stream.flush()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m agent", description="KernelCourt agent rollouts.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one rollout on a task file against an OpenAI-compatible endpoint")
    run.add_argument(
        "--task", required=True, help="KernelBench-format task file (Model, get_inputs, get_init_inputs)"
    )
    run.add_argument("--base-url", required=True, help="API root, e.g. http://localhost:8000/v1")
    run.add_argument("--model", required=True)
    run.add_argument("--api-key", default=None, help="default: $KERNELCOURT_LLM_API_KEY or $OPENAI_API_KEY")
    run.add_argument("--max-turns", type=int, default=None)
    run.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    run.add_argument("--track", choices=("strict", "open"), default="strict")
    run.add_argument(
        "--json", action="store_true", help="print events as JSON lines and a final summary line"
    )
    run.add_argument(
        "--contrastive-file", default=None, help="JSON/JSONL of earlier variants {source, speedup, status}"
    )
    run.add_argument("--contrastive-k", type=int, default=4)
    run.add_argument(
        "--tools", action="store_true", help="offer native tool calls (compile/verify/profile/submit)"
    )
    run.add_argument("--training", action="store_true", help="training defaults (150 turns, temperature 1)")
    run.add_argument("--temperature", type=float, default=None)
    run.add_argument("--max-completion-tokens", type=int, default=4096)
    run.add_argument("--context-tokens", type=int, default=32768)
    run.add_argument("--max-total-tokens", type=int, default=None)
    run.add_argument("--max-wall-s", type=float, default=None)
    run.add_argument(
        "--target-speedup",
        type=float,
        default=None,
        help="keep going until a submission is this much faster than --target-baseline (default 1.05)",
    )
    run.add_argument("--target-baseline", default=None, help="the baseline of the target (default compile)")
    run.add_argument(
        "--first-pass", action="store_true", help="end at the first passing submission (no speed target)"
    )
    run.add_argument(
        "--baselines", default=None, help="comma-separated baselines to time (default eager,compile)"
    )
    run.add_argument("--trials", type=int, default=None, help="correctness trials per evaluation (default 5)")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds per LLM request")
    run.add_argument("--retries", type=int, default=4, help="retries on 429/5xx/connection errors")
    run.add_argument("--task-name", default="")
    from agent.redteam.cli import add_arguments as add_redteam_arguments

    add_redteam_arguments(sub.add_parser("redteam", help="attack the evaluator with a model: every rewarded "
                                         "candidate is kept as a quarantined regression case"))
    return parser


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    return code


def cmd_run(args: argparse.Namespace) -> int:
    from agent.llm import OpenAIChatClient
    from agent.prompts import load_variants

    task_path = Path(args.task)
    try:
        task_source = task_path.read_text(encoding="utf-8")
    except OSError as exc:
        return _fail(f"cannot read task file {args.task}: {exc.strerror or exc}", EXIT_USAGE)
    parsed_url = urlparse(args.base_url)
    if parsed_url.scheme not in ("http", "https") or not parsed_url.netloc:
        return _fail(f"--base-url must be an http(s) URL, got {args.base_url!r}", EXIT_USAGE)
    variants = []
    if args.contrastive_file:
        try:
            variants = load_variants(args.contrastive_file)
        except OSError as exc:
            return _fail(
                f"cannot read contrastive file {args.contrastive_file}: {exc.strerror or exc}", EXIT_USAGE
            )
        except ValueError as exc:
            return _fail(f"bad contrastive file {args.contrastive_file}: {exc}", EXIT_USAGE)

    overrides = {
        "device": args.device,
        "track": args.track,
        "task_name": args.task_name or task_path.stem,
        "max_completion_tokens": args.max_completion_tokens,
        "context_tokens": args.context_tokens,
        "max_total_tokens": args.max_total_tokens,
        "max_wall_s": args.max_wall_s,
        "use_tools": args.tools,
        "contrastive_variants": variants,
        "contrastive_k": args.contrastive_k,
    }
    if args.first_pass:
        overrides["target_speedup"] = None
    elif args.target_speedup is not None:
        overrides["target_speedup"] = args.target_speedup
    if args.target_baseline is not None:
        overrides["target_baseline"] = args.target_baseline
    if args.baselines is not None:
        overrides["baselines"] = tuple(b for b in args.baselines.split(",") if b)
    if args.max_turns is not None:
        overrides["max_turns"] = args.max_turns
    if args.trials is not None:
        overrides["trials"] = args.trials
    if args.temperature is not None:
        overrides["temperature"] = args.temperature
    try:
        config = (RolloutConfig.for_training if args.training else RolloutConfig.for_evaluation)(**overrides)
    except ValueError as exc:
        return _fail(str(exc), EXIT_USAGE)

    sink = JsonlSink(sys.stdout) if args.json else TextSink(sys.stdout)
    with OpenAIChatClient(
        args.base_url, args.model, api_key=args.api_key, timeout_s=args.timeout, max_retries=args.retries
    ) as client:
        summary = run_rollout(task_source, client, config=config, sink=sink)
    if args.json:
        sys.stdout.write(summary_json(summary) + "\n")
    else:
        sys.stdout.write(summary.headline() + "\n")
    sys.stdout.flush()
    if summary.stop_reason == "llm_error":
        return _fail(f"the model endpoint failed: {summary.error}", EXIT_LLM)
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "run":
        return cmd_run(args)
    if args.command == "redteam":
        from agent.redteam.cli import run as run_redteam

        return run_redteam(args)
    parser.error(f"unknown command {args.command!r}")
    return EXIT_USAGE
