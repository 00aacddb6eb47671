"""The training app's settings: Django settings win, then the environment, then a laptop default."""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings


def _setting(name: str, default: str) -> str:
    value = getattr(settings, name, None)
    return str(value) if value is not None else os.environ.get(name, default)


def runs_dir() -> Path:
    """Where run directories (config, metrics.jsonl, checkpoints) live: one ``run_<id>`` per run.
    On a team setup this must be storage the GPU worker and the web app both see."""
    return Path(_setting("TRAINING_RUNS_DIR", str(Path(settings.VAR_DIR) / "training_runs")))


def soft_time_limit_s() -> int:
    return int(_setting("TRAINING_SOFT_TIME_LIMIT_S", str(7 * 24 * 3600)))


CONFIGS_DIR = Path(settings.BASE_DIR) / "training" / "configs"
METRICS_PAGE_MAX = 1000
PAGE_METRICS_MAX = 5000  # steps embedded in the run page; the websocket sends the rest
SAMPLES_PER_STEP_MAX = 64


def leaderboard_suite() -> str:
    """The suite the admin action evaluates a checkpoint on (the built-in suite by default)."""
    return _setting("TRAINING_LEADERBOARD_SUITE", "arena")
