"""The rollouts app's settings: Django settings win, then the environment, then a laptop default."""

from __future__ import annotations

import os

from django.conf import settings


def _setting(name: str, default: str) -> str:
    value = getattr(settings, name, None)
    return str(value) if value is not None else os.environ.get(name, default)


def llm_timeout_s() -> float:
    """How long one chat completion may take (large models on busy servers are slow)."""
    return float(_setting("ROLLOUT_LLM_TIMEOUT_S", "600"))


def llm_max_retries() -> int:
    return int(_setting("ROLLOUT_LLM_MAX_RETRIES", "4"))


def soft_time_limit_s() -> int:
    return int(_setting("ROLLOUT_SOFT_TIME_LIMIT_S", str(24 * 3600)))


MAX_TURNS_LIMIT = 1000
EVENTS_PAGE_MAX = 500
