"""What other apps plug into arena, each registered explicitly from its ``AppConfig.ready`` (no signals).

arena never imports those apps: the review app registers the rule set new evaluations run under,
the kernels listings leave out, and what follows a stored evaluation (its review flags).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import QuerySet

_rule_set: Callable[[str], dict[str, Any]] | None = None
_hidden_kernels: Callable[..., QuerySet] | None = None
_evaluation_stored: list[Callable[..., Any]] = []


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
