"""Pydantic schemas of the rollouts API (in and out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict

from webapp.core.permissions import visible_error
from webapp.core.text import Name, SafeJson, Text

from . import selectors


class RolloutLaunchIn(Schema):
    """Launch one rollout (``task_id``) or one per task of a suite (``suite``, optional ``level``).

    ``endpoint``: the name of a registered LLM endpoint (``GET /api/rollouts/endpoints``; staff register
    them, with the key in the worker's environment). ``submitter``: a name you may post under (see
    ``POST /api/kernels``); ``submitter_kind`` left out: the existing kind, ``agent`` for a new one.
    ``settings``: RolloutConfig fields (max_turns, track, device, target_speedup, temperature,
    use_tools, max_total_tokens, max_wall_s, …) and ``contrastive`` (bool)."""

    # unknown fields are refused: a client still sending ``base_url``/``api_key`` must hear that they
    # are gone, not have them ignored
    model_config = ConfigDict(extra="forbid")

    task_id: int | None = None
    suite: Text(64) | None = None
    level: int | None = None
    submitter: Name
    submitter_kind: Literal["model", "agent", "checkpoint", "human"] | None = None
    endpoint: Name
    settings: SafeJson = Field(default_factory=dict)


class LlmEndpointOut(Schema):
    name: str
    model: str
    description: str
    builtin: bool


class RolloutLaunchOut(Schema):
    rollout_ids: list[int]
    batch_id: int | None
    status: str
    stream: list[str]


class RolloutOut(Schema):
    id: int
    task_id: int
    task: str
    submitter: str
    batch_id: int | None
    endpoint: str | None
    model: str
    status: str
    stop_reason: str
    turns: int
    evaluations: int
    prompt_tokens: int
    completion_tokens: int
    passed: bool
    best_speedup: float | None
    best_reward: float | None  # effective: review's relabel of the best evaluation, if any
    best_reward_original: float | None
    best_reward_changed_by: dict[str, Any] | None
    best_kernel_id: int | None
    best_evaluation_id: int | None
    cancel_requested: bool
    error: str  # its owner sees it without server paths, staff all of it, anyone else ""
    created_by: str | None
    created: datetime
    started: datetime | None
    finished: datetime | None

    @staticmethod
    def resolve_task(obj) -> str:
        return obj.task.name

    @staticmethod
    def resolve_error(obj, context) -> str:
        return visible_error(obj.error, user=context["request"].user, owner_id=obj.created_by_id)

    @staticmethod
    def resolve_created_by(obj) -> str | None:
        return obj.created_by.get_username() if obj.created_by_id else None

    @staticmethod
    def resolve_submitter(obj) -> str:
        return obj.submitter.name

    @staticmethod
    def resolve_endpoint(obj) -> str | None:
        return obj.endpoint.name if obj.endpoint_id else None

    @staticmethod
    def resolve_best_reward(obj) -> float | None:
        return selectors.rollout_best_reward(obj).effective

    @staticmethod
    def resolve_best_reward_original(obj) -> float | None:
        return selectors.rollout_best_reward(obj).original

    @staticmethod
    def resolve_best_reward_changed_by(obj) -> dict[str, Any] | None:
        change = selectors.rollout_best_reward(obj).changed_by
        return change.to_dict() if change else None


class RolloutDetailOut(RolloutOut):
    settings: dict[str, Any]
    summary: dict[str, Any]
    candidates: list[dict[str, Any]]


class RolloutPage(Schema):
    count: int
    page: int
    page_size: int
    items: list[RolloutOut]


class RolloutEventOut(Schema):
    seq: int
    kind: str
    role: str
    turn: int
    content: str
    tool_call: dict[str, Any] | None
    evaluation: dict[str, Any] | None
    reward: float | None
    prompt_tokens: int
    completion_tokens: int
    elapsed_s: float
    data: dict[str, Any]
    created: str | None


class RolloutEventPage(Schema):
    rollout_id: int
    status: str
    finished: bool
    items: list[RolloutEventOut]
    next_after_seq: int
    has_more: bool


class ErrorOut(Schema):
    detail: str
