"""What the integration tests need from the machine, and what happens when it is missing: a skip on a
laptop, a failure under ``CI=true`` (where a missing service means a broken CI, not a passed test)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def service_missing(reason: str) -> NoReturn:
    if in_ci():
        pytest.fail(f"{reason} (CI=true: a missing service fails the run instead of skipping)", pytrace=False)
    pytest.skip(reason)


def redis_required(url: str) -> None:
    """Fail (CI) or skip unless Redis answers at ``url``."""
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.exceptions.RedisError as exc:
        service_missing(f"no Redis at {url}: {exc}")
