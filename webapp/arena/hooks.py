"""What other apps plug into arena, each registered explicitly from its ``AppConfig.ready`` (no signals).

arena never imports those apps: the review app registers the rule set new evaluations run under,
the kernels listings leave out, what follows a stored evaluation (its review flags), and how review
replaces an evaluation's reward (the effective reward every page, API and export shows), and how
many cases wait in its queue (the demo prints it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

_rule_set: Callable[[str], dict[str, Any]] | None = None
_hidden_kernels: Callable[..., QuerySet] | None = None
_evaluation_stored: list[Callable[..., Any]] = []


@dataclass(frozen=True)
class RewardReview:
    """How another app's decision replaces an evaluation's reward, read without a query of its own.

    Both readers return None (the evaluator's reward stands) or the keyword arguments of
    ``selectors.reward_effective``: ``relabel_reward``, ``reason``, ``case_id``, ``rule``, ``at``.
    """

    related: tuple[str, ...]  # select_related paths from Evaluation that make ``of_evaluation`` free
    values: tuple[str, ...]  # values_list paths from Evaluation, in the order ``of_values`` reads them
    of_evaluation: Callable[[Any], dict[str, Any] | None]
    of_values: Callable[[tuple], dict[str, Any] | None]


_reward_review: RewardReview | None = None
_open_reviews: Callable[[], int] | None = None


def rule_set_provider_register(provider: Callable[[str], dict[str, Any]]) -> None:
    """``provider(track)`` -> the rule set (``EvalRequest.rule_set``) of a new evaluation on ``track``."""
    global _rule_set
    _rule_set = provider


def rule_set_for(track: str) -> dict[str, Any] | None:
    """None: no provider registered; the evaluator applies its built-in rules for the track."""
    return _rule_set(track) if _rule_set is not None else None


def hidden_kernels_register(provider: Callable[..., QuerySet]) -> None:
    """``provider(track=...)`` -> a subquery of kernel ids listings and leaderboards leave out."""
    global _hidden_kernels
    _hidden_kernels = provider


def hidden_kernels(track: str | None = None) -> QuerySet | None:
    return _hidden_kernels(track=track) if _hidden_kernels is not None else None


def evaluation_stored_register(hook: Callable[..., Any]) -> None:
    """``hook(evaluation_id=...)`` runs inside the transaction that stores an evaluation's result, so
    the result and what it implies are committed together or not at all. Hooks must be idempotent."""
    if hook not in _evaluation_stored:
        _evaluation_stored.append(hook)


def evaluation_stored_hooks() -> list[Callable[..., Any]]:
    return list(_evaluation_stored)


def evaluation_stored_unregister(hook: Callable[..., Any]) -> None:
    if hook in _evaluation_stored:
        _evaluation_stored.remove(hook)


def reward_review_register(review: RewardReview | None) -> None:
    global _reward_review
    _reward_review = review


def reward_review() -> RewardReview | None:
    """None: no app replaces rewards; every evaluation's reward is the evaluator's."""
    return _reward_review


def open_reviews_register(count: Callable[[], int]) -> None:
    """``count()`` -> how many cases wait for a verdict."""
    global _open_reviews
    _open_reviews = count


def open_reviews() -> int | None:
    """None: no app keeps a review queue."""
    return _open_reviews() if _open_reviews is not None else None
