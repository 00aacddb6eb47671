"""The review app's settings: Django settings win, then the environment, then a laptop default."""

from __future__ import annotations

import os

from django.conf import settings


def _setting(name: str, default: str) -> str:
    value = getattr(settings, name, None)
    return str(value) if value is not None else os.environ.get(name, default)


def reviewers_per_item() -> int:
    """How many reviewers must decide an item; a verdict wins with a strict majority of this number."""
    return max(1, int(_setting("REVIEW_REVIEWERS_PER_ITEM", "2")))


def extreme_speedup() -> float:
    """Speedup vs eager above which a passed kernel is flagged (KernelBench's suspicion line)."""
    return float(_setting("REVIEW_EXTREME_SPEEDUP", "10.0"))


def judge_endpoint() -> dict[str, str]:
    """The optional LLM judge: an OpenAI-compatible endpoint; empty base_url means no judge."""
    return {
        "base_url": _setting("REVIEW_JUDGE_BASE_URL", ""),
        "model": _setting("REVIEW_JUDGE_MODEL", ""),
        "api_key": _setting("REVIEW_JUDGE_API_KEY", ""),
    }


REVIEWER_GROUP = "Reviewer"
DECIDE_PERMISSION = "review.decide"
