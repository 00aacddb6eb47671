"""Tests: PostgreSQL at 127.0.0.1:5432 unless DATABASE_URL says otherwise; jobs never leave the test."""

import os

from .base import *  # noqa: F403
from .database import database_from_url

DATABASES = {
    "default": database_from_url(
        os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres"),
        sqlite_path=VAR_DIR / "test.sqlite3",  # noqa: F405
    )
}
# one test database per pytest process: teammates run their suites on the same server
DATABASES["default"]["TEST"] = {
    "NAME": os.environ.get("TEST_DATABASE_NAME", f"test_kernelcourt_{os.getpid()}")
}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Tests say explicitly when a job runs; "inline" runs enqueued jobs after commit in the same thread.
JOB_BACKEND = os.environ.get("JOB_BACKEND", "inline")
EVAL_BASELINES = ("eager",)
EVAL_TRIALS = 2
# No heartbeat thread beats inside a test unless the test asks (a beat from another connection would
# wait on the row locks of a test that runs in one transaction).
JOB_HEARTBEAT_S = float(os.environ.get("JOB_HEARTBEAT_S", "3000"))
JOB_STALE_AFTER_S = float(os.environ.get("JOB_STALE_AFTER_S", "3600"))
