"""Pydantic schemas of the rollouts API (in and out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema

from . import selectors


class RolloutLaunchIn(Schema):
    """Launch one rollout (``task_id``) or one per task of a suite (``suite``, optional ``level``).

    ``settings``: RolloutConfig fields (max_turns, track, device, target_speedup, temperature,
    use_tools, max_total_tokens, max_wall_s, …) and ``contrastive`` (bool). ``api_key``: the
    endpoint's key, handed to the worker with the job and never stored; leave it out to use the
    worker's ``KERNELCOURT_LLM_API_KEY``."""

    task_id: int | None = None
    suite: str | None = None
    level: int | None = None
    submitter: str
    submitter_kind: Literal["model", "agent", "checkpoint", "human"] = "agent"
    base_url: str
    model: str
    settings: dict[str, Any] = Field(default_factory=dict)
    api_key: str | None = None


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
    base_url: str
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
    error: str
    created: datetime
    started: datetime | None
    finished: datetime | None

    @staticmethod
    def resolve_task(obj) -> str:
        return obj.task.name

    @staticmethod
    def resolve_submitter(obj) -> str:
        return obj.submitter.name

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
