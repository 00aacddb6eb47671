"""The sweeper: rows whose worker died go back to the queue.

A ``running`` row whose heartbeat is older than ``JOB_STALE_AFTER_S`` has lost its worker (killed,
out of memory, its machine gone): it is enqueued again, or failed as ``infrastructure`` once it has
had ``JOB_MAX_ATTEMPTS`` attempts. The decision is by heartbeat age only: a live worker beats, so its
row is never swept however long the job runs. It runs every ``JOB_SWEEP_S``: as a Celery beat task
(``webapp.core.tasks.jobs_sweep_task``) in the team setup, as a thread of the web process with the
embedded worker.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q

from .runner import JobKind, is_silent, job_kinds, job_return_to_queue, stale_before

logger = logging.getLogger(__name__)

SWEEP_BATCH = 500


def _stale_rows(kind: JobKind) -> list[int]:
    before = stale_before()
    stale = Q(heartbeat__lt=before) | Q(heartbeat__isnull=True, started__lt=before)
    stale |= Q(heartbeat__isnull=True, started__isnull=True)
    return list(
        kind.model.objects.filter(stale, status=kind.model.RUNNING).order_by("pk").values_list("pk", flat=True)[
            :SWEEP_BATCH
        ]
    )


def _sweep_one(kind: JobKind, job_id: int) -> str | None:
    with transaction.atomic():
        # skip a row another sweeper or a claiming worker holds; check again under the lock
        row = (
            kind.model.objects.select_for_update(skip_locked=True)
            .filter(pk=job_id, status=kind.model.RUNNING)
            .values("worker", "heartbeat", "started")
            .first()
        )
        if row is None or not is_silent(row["heartbeat"], row["started"]):
            return None
        last = row["heartbeat"] or row["started"]
        reason = (
            f"its worker {row['worker'] or '?'} stopped sending heartbeats"
            + (f" (last at {last:%Y-%m-%d %H:%M:%S} UTC)" if last else "")
        )
        return job_return_to_queue(kind, job_id, reason=reason)


def jobs_sweep() -> dict[str, dict[str, int]]:
    """One pass over every registered kind; returns ``{kind: {new status: count}}`` of the rows moved."""
    report: dict[str, dict[str, int]] = {}
    for kind in job_kinds():
        moved: dict[str, int] = {}
        for job_id in _stale_rows(kind):
            status = _sweep_one(kind, job_id)
            if status is not None:
                moved[status] = moved.get(status, 0) + 1
                logger.warning("swept %s %s: its worker stopped sending heartbeats -> %s", kind.name, job_id, status)
        if moved:
            report[kind.name] = moved
    return report


_thread: threading.Thread | None = None
_thread_lock = threading.Lock()


def _sweep_forever(stop: threading.Event) -> None:
    while True:
        try:
            jobs_sweep()
        except Exception:  # a failed pass (the database restarting) must not end the sweeper
            logger.warning("job sweep failed", exc_info=True)
        finally:
            connections.close_all()
        if stop.wait(float(settings.JOB_SWEEP_S)):
            return


def sweeper_thread_start(stop: threading.Event | None = None) -> threading.Thread:
    """The embedded worker's sweeper: a daemon thread of this process (started once)."""
    global _thread
    with _thread_lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(
                target=_sweep_forever, args=(stop or threading.Event(),), name="job-sweeper", daemon=True
            )
            _thread.start()
        return _thread
