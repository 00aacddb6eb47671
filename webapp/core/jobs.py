"""Enqueue a job after commit, on whichever backend the settings chose.

- ``celery``: ``task.delay_on_commit(*ids)`` onto the broker (REDIS_URL set).
- ``embedded``: no broker; the same task function runs on a small thread pool inside this process
  after the transaction commits (a laptop's ``make demo``).
- ``inline``: after commit, in the calling thread (tests that want the job done when the request is).

Jobs receive ids, never model instances, and are idempotent: the job row is the truth.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connections, transaction

logger = logging.getLogger(__name__)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_pending: list[Future] = []


def _embedded_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.EMBEDDED_WORKERS, thread_name_prefix="embedded-worker"
            )
        return _pool


def _run_in_thread(func: Any, args: tuple) -> None:
    close_old_connections()
    try:
        func(*args)
    except Exception:  # the job row already carries the error; keep the worker alive
        logger.exception("embedded job %s%r failed", getattr(func, "name", func), args)
    finally:
        connections.close_all()


def job_enqueue(task: Any, *args: Any) -> None:
    """Run ``task(*args)`` once the current transaction commits. ``task`` is a Celery task."""
    backend = settings.JOB_BACKEND
    if backend == "celery":
        task.delay_on_commit(*args)
    elif backend == "embedded":
        func = task.run  # the plain function behind the Celery task: same code, no broker

        def submit() -> None:
            _pending.append(_embedded_pool().submit(_run_in_thread, func, args))

        transaction.on_commit(submit)
    elif backend == "inline":
        transaction.on_commit(lambda: task.run(*args))
    else:
        raise ValueError(f"unknown JOB_BACKEND {backend!r}; use celery, embedded or inline")


def embedded_jobs_wait(timeout: float | None = None) -> None:
    """Block until the embedded jobs submitted so far are done (demo command and tests)."""
    while _pending:
        _pending.pop(0).result(timeout=timeout)
