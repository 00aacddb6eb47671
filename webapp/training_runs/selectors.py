"""Reads: runs, their metrics after a step, samples of a step, checkpoints, state, recipes."""

from __future__ import annotations

import json
from typing import Any

from django.db.models import Max, QuerySet
from django.urls import reverse

from webapp.core.permissions import visible_error

from . import conf
from .models import TrainingCheckpoint, TrainingMetric, TrainingRun, TrainingSample


def training_recipe_names() -> list[str]:
    """The example configs shipped in training/configs/ (``tiny_cpu_grpo``, ``cuda_agent``, …)."""
    return sorted(p.stem for p in conf.CONFIGS_DIR.glob("*.json"))


def training_recipe_config(*, recipe: str) -> dict[str, Any]:
    """The JSON of one example config; only names from the listing (no paths)."""
    if recipe not in training_recipe_names():
        raise KeyError(recipe)
    return json.loads((conf.CONFIGS_DIR / f"{recipe}.json").read_text(encoding="utf-8"))


def training_run_list(*, status: str | None = None) -> QuerySet[TrainingRun]:
    qs = TrainingRun.objects.select_related("created_by").defer("config")
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-created", "-id")


def training_run_get(*, run_id: int) -> TrainingRun:
    return TrainingRun.objects.select_related("created_by").get(pk=run_id)


def training_run_exists(*, run_id: int) -> bool:
    return TrainingRun.objects.filter(pk=run_id).exists()


def training_metrics_after(*, run_id: int, after_step: int = 0, limit: int = 100) -> list[TrainingMetric]:
    """Metric rows with step > after_step, in step order, at most ``limit``."""
    return list(
        TrainingMetric.objects.filter(run_id=run_id, step__gt=after_step).order_by("step")[: max(1, limit)]
    )


def training_metric_payload(metric: TrainingMetric) -> dict[str, Any]:
    """What clients (websocket, API, page) get for one step: ``seq`` is the step."""
    return {"seq": metric.step, "step": metric.step, "stage": metric.stage, "data": metric.data}


def training_samples(*, run_id: int, step: int) -> list[TrainingSample]:
    return list(
        TrainingSample.objects.filter(run_id=run_id, step=step).order_by("position")[
            : conf.SAMPLES_PER_STEP_MAX
        ]
    )


def training_sample_payload(sample: TrainingSample) -> dict[str, Any]:
    return {
        "step": sample.step,
        "position": sample.position,
        "task": sample.task,
        "group": sample.group,
        "index": sample.index,
        "reward": sample.reward,
        "status": sample.status,
        "speedup_eager": sample.speedup_eager,
        "speedup_compile": sample.speedup_compile,
        "response": sample.response,
        "turns": sample.turns,
    }


def training_last_sample_step(*, run_id: int) -> int | None:
    return TrainingSample.objects.filter(run_id=run_id).aggregate(m=Max("step"))["m"]


def training_checkpoints(*, run_id: int) -> list[TrainingCheckpoint]:
    return list(TrainingCheckpoint.objects.filter(run_id=run_id).select_related("submitter").order_by("step"))


def training_checkpoint_payload(checkpoint: TrainingCheckpoint) -> dict[str, Any]:
    return {
        "id": checkpoint.pk,
        "step": checkpoint.step,
        "stage": checkpoint.stage,
        "path": checkpoint.path,
        "submitter_id": checkpoint.submitter_id,
        "submitter": checkpoint.submitter.name if checkpoint.submitter else None,
        "submitter_url": (
            reverse("arena:submitter_detail", args=[checkpoint.submitter.name])
            if checkpoint.submitter
            else None
        ),
    }


def training_run_state(*, run_id: int, viewer: Any = None) -> dict[str, Any] | None:
    """The run's state for clients; its error as ``viewer`` may see it (owner: without server
    paths; staff: all of it; anyone else: nothing)."""
    row = (
        TrainingRun.objects.filter(pk=run_id)
        .values(
            "id",
            "status",
            "step",
            "total_steps",
            "resumed_from_step",
            "error",
            "cancel_requested",
            "created_by_id",
        )
        .first()
    )
    if row is None:
        return None
    row["error"] = visible_error(row["error"], user=viewer, owner_id=row.pop("created_by_id"))
    row["finished"] = row["status"] in TrainingRun.FINISHED
    row["last_sample_step"] = training_last_sample_step(run_id=run_id)
    row["checkpoints"] = [training_checkpoint_payload(c) for c in training_checkpoints(run_id=run_id)]
    return row


def training_registry() -> dict[str, list[dict[str, str]]]:
    """The registered task sets and base models users may name (never their server locations)."""
    from .models import RegisteredModel, RegisteredTaskSet

    def entries(model: type) -> list[dict[str, str]]:
        return list(model.objects.filter(enabled=True).order_by("name").values("name", "description"))

    return {"task_sets": entries(RegisteredTaskSet), "models": entries(RegisteredModel)}
