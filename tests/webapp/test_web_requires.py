"""tests/webapp/requires.py: a missing service skips on a laptop and fails under CI=true."""

from __future__ import annotations

import pytest

from tests.webapp.requires import redis_required, service_missing

NOBODY_LISTENS = "redis://127.0.0.1:1/0"


def test_a_missing_redis_fails_the_test_under_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")

    with pytest.raises(pytest.fail.Exception, match=r"^no Redis at redis://127\.0\.0\.1:1/0: .*\(CI=true: "):
        redis_required(NOBODY_LISTENS)


def test_a_missing_service_is_skipped_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)

    with pytest.raises(pytest.skip.Exception, match="^no Chromium$"):
        service_missing("no Chromium")
