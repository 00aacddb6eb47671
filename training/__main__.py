"""``python -m training run --config RUN.json [--resume] [--out DIR]``: JSON lines of per-step metrics.

Also ``python -m training write-configs`` (regenerate training/configs/ from the built-in recipes),
``python -m training check-contamination --config RUN.json`` (the report, without training) and
``python -m training export RUN_DIR --step N OUT_DIR`` (a checkpoint as a Hugging Face directory;
to put it on the leaderboard: ``python manage.py checkpoint_leaderboard``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from training.metrics import JsonlSink
from training.recipes import RunConfig, write_builtin_configs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run or resume a training recipe")
    run.add_argument("--config", required=True, help="RunConfig JSON (see training/configs/)")
    run.add_argument("--out", default=None, help="run directory (default: runs/<config name>)")
    run.add_argument("--resume", action="store_true", help="continue after the last checkpoint in --out")
    run.add_argument("--all-events", action="store_true", help="also print trajectories/checkpoints/status")
    check = sub.add_parser("check-contamination", help="print the contamination report of a config's tasks")
    check.add_argument("--config", required=True)
    sub.add_parser("write-configs", help="write the built-in recipes to training/configs/")
    export = sub.add_parser("export", help="write a checkpoint as a Hugging Face directory (save_pretrained)")
    export.add_argument("run", help="the run directory (--out of `run`)")
    export.add_argument("--step", type=int, required=True, help="the checkpoint's global step")
    export.add_argument("out", help="the directory to write")
    args = parser.parse_args(argv)

    if args.command == "write-configs":
        write_builtin_configs()
        return 0
    if args.command == "export":
        from training.export import ExportError, export_checkpoint

        try:
            path = export_checkpoint(args.run, args.step, args.out)
        except (ExportError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(json.dumps({"exported": str(path), "step": args.step}))
        return 0
    try:
        config = RunConfig.load(args.config)
    except (OSError, ValueError, TypeError, json.JSONDecodeError) as exc:
        print(f"error: cannot load {args.config}: {exc}", file=sys.stderr)
        return 2
    if args.command == "check-contamination":
        from training.runner import load_tasks

        _, report = load_tasks(config)
        print(json.dumps(report, indent=2))
        return 0
    from training.runner import run_training

    out = Path(args.out or Path("runs") / config.name)
    result = run_training(config, out_dir=out, resume=args.resume,
                          sink=JsonlSink(sys.stdout, metrics_only=not args.all_events))
    print(json.dumps({"type": "result", **result.to_dict()}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
