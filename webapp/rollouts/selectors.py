"""Reads: rollouts, their events after a seq, candidate kernels, contrastive variants."""

from __future__ import annotations

from typing import Any

from django.db.models import Max, QuerySet

from webapp.arena import selectors as arena_selectors
from webapp.arena.models import Evaluation
from webapp.core.permissions import can_manage, visible_error
from webapp.core.text import scrub_paths

from .models import LlmEndpoint, Rollout, RolloutBatch, RolloutEvent


def rollout_list(
    *,
    status: str | None = None,
    task_id: int | None = None,
    submitter: str | None = None,
    batch_id: int | None = None,
) -> QuerySet[Rollout]:
    qs = Rollout.objects.select_related(
        "task", "submitter", "best_kernel", "endpoint", "created_by", *_best_evaluation_related()
    )
    if status:
        qs = qs.filter(status=status)
    if task_id is not None:
        qs = qs.filter(task_id=task_id)
    if submitter:
        qs = qs.filter(submitter__name=submitter)
    if batch_id is not None:
        qs = qs.filter(batch_id=batch_id)
    return qs.order_by("-created", "-id")


def _best_evaluation_related() -> list[str]:
    return ["best_evaluation", *(f"best_evaluation__{p}" for p in arena_selectors.evaluation_related())]


def rollout_get(*, rollout_id: int) -> Rollout:
    return Rollout.objects.select_related(
        "task", "submitter", "best_kernel", "batch", "endpoint", "created_by", *_best_evaluation_related()
    ).get(pk=rollout_id)


def rollout_best_reward(rollout: Rollout) -> arena_selectors.EffectiveReward:
    """The rollout's best reward after review: its best evaluation's relabel, if review replaced it."""
    if rollout.best_evaluation_id is None:
        return arena_selectors.reward_effective(reward=rollout.best_reward)
    reviewed = arena_selectors.evaluation_reward(rollout.best_evaluation)
    if reviewed.changed_by is None:
        return arena_selectors.reward_effective(reward=rollout.best_reward)
    return arena_selectors.EffectiveReward(
        effective=reviewed.effective, original=rollout.best_reward, changed_by=reviewed.changed_by
    )


def batch_get(*, batch_id: int) -> RolloutBatch:
    return RolloutBatch.objects.select_related("submitter").get(pk=batch_id)


def rollout_events_after(*, rollout_id: int, after_seq: int = -1, limit: int = 100) -> list[RolloutEvent]:
    """Events with seq > after_seq, in seq order, at most ``limit``."""
    return list(
        RolloutEvent.objects.filter(rollout_id=rollout_id, seq__gt=after_seq).order_by("seq")[: max(1, limit)]
    )


def rollout_last_seq(*, rollout_id: int) -> int:
    """The highest stored seq, -1 when there is none."""
    value = RolloutEvent.objects.filter(rollout_id=rollout_id).aggregate(m=Max("seq"))["m"]
    return -1 if value is None else int(value)


def rollout_state(*, rollout_id: int, viewer: Any = None) -> dict[str, Any] | None:
    """The rollout's state for clients; its error as ``viewer`` may see it (owner: without server
    paths; staff: all of it; anyone else: nothing)."""
    row = (
        Rollout.objects.filter(pk=rollout_id)
        .values(
            "id",
            "status",
            "stop_reason",
            "turns",
            "prompt_tokens",
            "completion_tokens",
            "passed",
            "best_speedup",
            "best_kernel_id",
            "error",
            "created_by_id",
        )
        .first()
    )
    if row is None:
        return None
    row["error"] = visible_error(row["error"], user=viewer, owner_id=row.pop("created_by_id"))
    row["finished"] = row["status"] in Rollout.FINISHED
    return row


ERROR_HIDDEN = "the rollout failed; its owner and staff see the error on the rollout's page"


def rollout_event_payload(event: RolloutEvent, *, errors_visible: bool = False) -> dict[str, Any]:
    """What clients (websocket and API) get for one event. An ``error`` event (a worker's traceback)
    is shown without server paths when ``errors_visible`` (the viewer may manage the rollout), and
    as a plain sentence otherwise."""
    content = event.content
    if event.kind == "error":
        content = scrub_paths(content) if errors_visible else ERROR_HIDDEN
    return {
        "seq": event.seq,
        "kind": event.kind,
        "role": event.role,
        "turn": event.turn,
        "content": content,
        "tool_call": event.tool_call,
        "evaluation": event.evaluation,
        "reward": event.reward,
        "prompt_tokens": event.prompt_tokens,
        "completion_tokens": event.completion_tokens,
        "elapsed_s": event.elapsed_s,
        "data": event.data,
        "created": event.created.isoformat() if event.created else None,
    }


def rollout_candidates(*, rollout_id: int) -> list[dict[str, Any]]:
    """The kernels the agent had evaluated, in order: turn, tool, status, speedup, reward."""
    rows = (
        RolloutEvent.objects.filter(rollout_id=rollout_id, kind="evaluation")
        .order_by("seq")
        .values_list("seq", "turn", "evaluation", "reward", "data")
    )
    out = []
    for seq, turn, evaluation, reward, data in rows:
        evaluation = evaluation or {}
        data = data or {}
        out.append(
            {
                "seq": seq,
                "turn": turn,
                "tool": data.get("tool", ""),
                "status": evaluation.get("status", ""),
                "correct": bool(evaluation.get("correct")),
                "speedup_eager": (evaluation.get("speedup") or {}).get("eager"),
                "reward": reward,
                "kernel_hash": data.get("kernel_hash", ""),
                "accepted": bool(data.get("accepted")),
            }
        )
    return out


def contrastive_variants(*, task_id: int, track: str, limit: int = 32) -> list:
    """Earlier kernels of a task with their verdicts (newest first, one per kernel), as agent Variants."""
    from agent import Variant

    rows = (
        Evaluation.objects.filter(kernel__task_id=task_id, track=track)
        .exclude(status__in=[Evaluation.Status.QUEUED, Evaluation.Status.RUNNING, Evaluation.Status.ERROR])
        .order_by("-id")
        .values_list("kernel_id", "kernel__source", "status", "correct", "speedup_eager")[: limit * 4]
    )
    seen: set[int] = set()
    variants = []
    for kernel_id, source, status, correct, speedup in rows:
        if kernel_id in seen:
            continue
        seen.add(kernel_id)
        passed = status == Evaluation.Status.PASSED and correct
        variants.append(Variant(source=source, speedup=speedup if passed else None, status=status))
        if len(variants) >= limit:
            break
    return variants


def task_exists(*, task_id: int) -> bool:
    from webapp.arena.models import Task

    return Task.objects.filter(pk=task_id).exists()


def rollout_errors_visible(*, rollout_id: int, viewer: Any) -> bool:
    """Whether ``viewer`` may read the rollout's errors (its owner or staff)."""
    owner_id = Rollout.objects.filter(pk=rollout_id).values_list("created_by_id", flat=True).first()
    return can_manage(viewer, owner_id)


def llm_endpoint_list() -> QuerySet[LlmEndpoint]:
    """The endpoints users may choose (enabled), by name."""
    return LlmEndpoint.objects.filter(enabled=True).order_by("name")
