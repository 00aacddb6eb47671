"""``python -m agent redteam --base-url URL --model NAME --tasks T.py ... --out DIR``.

Exit status: 0 when the attack ran (whatever it found), 2 for usage errors, 3 when the model endpoint
failed for every conversation."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent.redteam.families import FAMILIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--base-url", required=True, help="OpenAI-compatible API root, e.g. http://host:8000/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tasks", nargs="+", required=True, help="task files (KernelBench format)")
    parser.add_argument("--families", default=None,
                        help=f"comma list of family numbers (default all: {min(FAMILIES)}-{max(FAMILIES)})")
    parser.add_argument("--attempts", type=int, default=3, help="candidates per task and family")
    parser.add_argument("--out", required=True, help="folder for report.json and quarantine/")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--track", choices=["strict", "open"], default="strict")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--timing-budget", type=float, default=0.5)
    parser.add_argument("--contract", default=None, help="a file with the contract text the attacker is given "
                        "(default: the built-in summary of the public contract)")
    parser.add_argument("--api-key", default=None, help="default: $KERNELCOURT_LLM_API_KEY or $OPENAI_API_KEY")


def run(args: argparse.Namespace) -> int:
    from agent.llm import OpenAIChatClient
    from agent.redteam.harness import AttackConfig, run_attack
    from agent.redteam.prompts import CONTRACT

    try:
        families = [int(x) for x in args.families.split(",")] if args.families else list(FAMILIES)
    except ValueError:
        print(f"error: --families must be numbers, got {args.families!r}", file=sys.stderr)
        return 2
    unknown = [n for n in families if n not in FAMILIES]
    if unknown:
        print(f"error: unknown families {unknown}; known: {min(FAMILIES)}-{max(FAMILIES)}", file=sys.stderr)
        return 2
    tasks = [Path(t) for t in args.tasks]
    missing = [str(t) for t in tasks if not t.is_file()]
    if missing:
        print(f"error: task file not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.attempts < 1:
        print("error: --attempts must be at least 1", file=sys.stderr)
        return 2
    contract = Path(args.contract).read_text(encoding="utf-8") if args.contract else CONTRACT
    config = AttackConfig(tasks=tasks, families=families, attempts=args.attempts, device=args.device,
                          track=args.track, out_dir=Path(args.out), trials=args.trials,
                          timing_budget_s=args.timing_budget, contract=contract, model=args.model)
    with OpenAIChatClient(args.base_url, args.model, api_key=args.api_key, max_retries=2) as client:
        report = run_attack(client, config, log=lambda line: print(line, file=sys.stderr, flush=True))
    print(report.table())
    print(f"report: {Path(args.out) / 'report.json'}")
    if report.errors and not any(a.candidate for a in report.attempts):
        print(f"error: the model endpoint failed: {report.errors[0]}", file=sys.stderr)
        return 3
    return 0
