"""Fixtures of the training-run tests: a tiny CPU config (tiny_cpu_grpo shrunk to seconds), run
directories under tmp_path, and a factory for runs with stored metrics and samples (no training).
The web app's factories (make_submitter, api_token, …) come from tests/webapp/conftest.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from training_run_helpers import TINY, store_step


@pytest.fixture
def tiny_config() -> dict[str, Any]:
    return json.loads(TINY.read_text(encoding="utf-8"))


@pytest.fixture(autouse=True)
def runs_dir(settings, tmp_path):
    settings.TRAINING_RUNS_DIR = str(tmp_path / "runs")
    return tmp_path / "runs"


@pytest.fixture
def make_run():
    """A TrainingRun row (as the launch service would write it) with ``steps`` stored steps of
    metrics (through the services: row first, then the ring) and two samples per step."""
    from training.recipes import RunConfig
    from webapp.training_runs.models import TrainingRun

    def make(
        *,
        steps: int = 0,
        status: str = "running",
        total_steps: int = 5,
        text=lambda step, i: f"reply {i} at step {step}",
        created_by=None,
        error: str = "",
    ) -> TrainingRun:
        config = RunConfig.load(TINY)
        run = TrainingRun.objects.create(
            name="factory",
            recipe="tiny_cpu_grpo",
            config=config.to_dict(),
            config_hash=config.config_hash(),
            base_model="tiny:tiny_llama",
            task_set="synthetic:4",
            status=status,
            total_steps=total_steps,
            created_by=created_by,
            error=error,
        )
        for step in range(1, steps + 1):
            store_step(run.pk, step, text)
        return run

    return make
