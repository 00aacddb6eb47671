"""Pydantic schemas of the training API (in and out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema

from webapp.core.permissions import visible_error
from webapp.core.text import SafeJson, Text


class TrainingLaunchIn(Schema):
    """Launch a run from a built-in recipe (``recipe``: a name of training/configs/*.json) or a full
    RunConfig (``config``), with optional ``base_model`` (``tiny:<kind>[,key=value…]`` or a path /
    hub name), ``task_set`` (``synthetic:N``, ``suite``, ``suite:a,b``, ``jsonl:PATH``) and
    ``overrides`` (merged into the config key by key; lists such as ``stages`` are replaced).

    Users who are not staff name a registered base model and task set (``GET /api/training/registry``);
    staff may also give a path, a hub name or a task set spec."""

    name: Text(128) = ""
    recipe: Text(64) | None = None
    config: SafeJson | None = None
    base_model: Text(500) = ""
    task_set: Text(500) = ""
    overrides: SafeJson = Field(default_factory=dict)


class TrainingLaunchOut(Schema):
    id: int
    status: str
    config_hash: str
    stream: str


class CheckpointOut(Schema):
    id: int
    step: int
    stage: str
    path: str
    submitter_id: int | None
    submitter: str | None
    submitter_url: str | None


class TrainingRunOut(Schema):
    id: int
    name: str
    recipe: str
    config_hash: str
    base_model: str
    task_set: str
    status: str
    step: int
    total_steps: int
    resumed_from_step: int | None
    cancel_requested: bool
    attempts: int
    error: str  # its owner sees it without server paths, staff all of it, anyone else ""
    created_by: str | None
    created: datetime
    started: datetime | None
    finished: datetime | None

    @staticmethod
    def resolve_error(obj, context) -> str:
        return visible_error(obj.error, user=context["request"].user, owner_id=obj.created_by_id)

    @staticmethod
    def resolve_created_by(obj) -> str | None:
        return obj.created_by.get_username() if obj.created_by_id else None


class TrainingRunDetailOut(TrainingRunOut):
    config: dict[str, Any]
    out_dir: str
    checkpoints: list[CheckpointOut]

    @staticmethod
    def resolve_checkpoints(obj) -> list[dict[str, Any]]:
        return obj.checkpoint_list  # set by the endpoint from selectors.training_checkpoints


class TrainingRunPage(Schema):
    count: int
    page: int
    page_size: int
    items: list[TrainingRunOut]


class MetricOut(Schema):
    seq: int
    step: int
    stage: str
    data: dict[str, Any]


class MetricPage(Schema):
    run_id: int
    status: str
    finished: bool
    items: list[MetricOut]
    next_after_step: int
    has_more: bool


class SampleOut(Schema):
    step: int
    position: int
    task: str
    group: int
    index: int
    reward: float | None
    status: str
    speedup_eager: float | None
    speedup_compile: float | None
    response: str
    turns: list[dict[str, Any]]


class SampleList(Schema):
    run_id: int
    step: int | None
    items: list[SampleOut]


class ErrorOut(Schema):
    detail: str


class CheckpointLeaderboardIn(Schema):
    """Evaluate a checkpoint on a suite through the agent: ``settings`` are the rollouts' settings
    (track, device, max_turns, temperature, …; see the rollouts API)."""

    suite: str
    level: int | None = None
    settings: dict[str, Any] | None = None


class CheckpointLeaderboardOut(Schema):
    batch_id: int
    submitter: str
    rollouts: int


class RegistryEntryOut(Schema):
    name: str
    description: str


class RegistryOut(Schema):
    task_sets: list[RegistryEntryOut]
    models: list[RegistryEntryOut]
