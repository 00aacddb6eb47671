"""One job runner for evaluations, rollouts and training runs: claim, heartbeat, time limit, retry,
fail, cancel and the doorbell, written once.

A kind of job is a ``JobKind`` (its model, a subclass of ``webapp.core.models.Job``, the Celery task
that runs one row, its doorbell), registered by its app's ``AppConfig.ready``. The app supplies only
what is its own: ``execute(ctx)`` does the work and ``store(ctx, outcome)`` writes the outcome.

- **claim**: ``queued`` -> ``running`` under a row lock, recording this process as the worker. A
  ``running`` row is claimed again only when its worker is dead: its heartbeat is older than
  ``JOB_STALE_AFTER_S``, or its worker was a process of this host that no longer exists (a pool process
  killed, whose job Celery redelivers at once). A live worker's row is never taken, however long it runs.
- **heartbeat**: a thread of the running process stamps the row every ``JOB_HEARTBEAT_S``; if the row
  is no longer its own (swept, failed, cancelled) it tells the job to stop.
- **time limit**: ``ctx.should_stop()`` turns true past the row's ``time_limit_s``; a job that does
  not return within ``JOB_STALE_AFTER_S`` after that is failed by its heartbeat thread, which then
  stops vouching for it. Celery's own limits (set from the same numbers) stop what cannot stop itself.
- **retry**: the database going away, or an outcome that could not be stored, puts the row back in
  the queue and enqueues it again; a row is claimed at most ``JOB_MAX_ATTEMPTS`` times, then it fails
  as ``infrastructure`` with the reason.
- **store**: the outcome is written in one transaction that first checks, under the row lock, that
  the row is still this worker's; a worker that lost its row (swept while partitioned away) writes nothing.
- **doorbell**: every change rings the kind's group after commit.

``webapp.core.sweeper`` returns rows of dead workers to the queue.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections, transaction
from django.db.models import F
from django.utils import timezone
from django.utils.module_loading import import_string

from .jobs import job_enqueue
from .models import ErrorKind, Job

logger = logging.getLogger(__name__)

# What a new attempt can fix: the database went away under the job.
RETRYABLE = (OperationalError, InterfaceError)
ERROR_MAX_CHARS = 20_000


@dataclass(frozen=True)
class JobKind:
    name: str
    model: type[Job]
    task: str  # dotted path of the Celery task that runs one row (it takes the row's id)
    ring: Callable[[int], None]  # the doorbell; called inside the transaction that changed the row
    time_limit_s: Callable[[], int]  # the limit of one attempt, read when a row is first claimed
    # how a failure raised by ``execute`` counts: the evaluator's own error is infrastructure; a
    # rollout's or a training run's is usually its input's (an endpoint that refused, a bad data path)
    execute_error_kind: str = ErrorKind.JOB
    # fields a cancelled row gets besides its status (e.g. a rollout's stop_reason)
    cancelled_fields: dict[str, Any] = field(default_factory=dict)


_kinds: dict[str, JobKind] = {}


def job_kind_register(kind: JobKind) -> JobKind:
    """Called by an app's ``AppConfig.ready``; the sweeper walks every registered kind."""
    _kinds[kind.name] = kind
    return kind


def job_kinds() -> list[JobKind]:
    return list(_kinds.values())


def job_kind(name: str) -> JobKind:
    return _kinds[name]


def worker_id() -> str:
    """``host:pid`` of this process: the worker a claimed row records."""
    return f"{socket.gethostname()}:{os.getpid()}"


def worker_is_dead_here(worker: str) -> bool:
    """True only for a worker of this host whose process no longer exists. A worker of another host
    is judged by its heartbeat alone."""
    host, _, pid = worker.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, someone else's
        return False
    return False


def stale_before() -> Any:
    return timezone.now() - timedelta(seconds=float(settings.JOB_STALE_AFTER_S))


def is_silent(heartbeat: Any, started: Any) -> bool:
    last = heartbeat or started
    return last is None or last < stale_before()


def job_enqueue_kind(kind: JobKind, job_id: int) -> None:
    """Enqueue ``kind``'s task for ``job_id`` after the current transaction commits."""
    job_enqueue(import_string(kind.task), job_id)


# --- state changes (each under the row lock, each rings) ----------------------------------------------


def _finish_cancelled(kind: JobKind, job_id: int) -> None:
    kind.model.objects.filter(pk=job_id).update(
        status=kind.model.CANCELLED_STATUS, finished=timezone.now(), **kind.cancelled_fields
    )
    kind.ring(job_id)


def _fail_row(kind: JobKind, job_id: int, *, error: str, error_kind: str) -> None:
    kind.model.objects.filter(pk=job_id).update(
        status=kind.model.FAILED_STATUS,
        error=error[-ERROR_MAX_CHARS:],
        error_kind=error_kind,
        finished=timezone.now(),
    )
    kind.ring(job_id)


def _give_up_message(attempts: int, reason: str) -> str:
    return f"gave up after {attempts} attempts (JOB_MAX_ATTEMPTS); the last one: {reason}"


def _requeue_row(kind: JobKind, job_id: int, *, reason: str) -> None:
    kind.model.objects.filter(pk=job_id).update(
        status=kind.model.QUEUED, worker="", heartbeat=None, error=reason[-ERROR_MAX_CHARS:]
    )
    job_enqueue_kind(kind, job_id)
    kind.ring(job_id)


def job_return_to_queue(kind: JobKind, job_id: int, *, reason: str, worker: str | None = None) -> str | None:
    """A running row whose attempt ended without an outcome: back to the queue (and enqueued again),
    or ``cancelled`` if a cancel was asked, or failed as infrastructure once out of attempts.
    ``worker``: only if the row is still that worker's. Returns the row's new status (None: not ours)."""
    with transaction.atomic():
        qs = kind.model.objects.select_for_update().filter(pk=job_id, status=kind.model.RUNNING)
        if worker is not None:
            qs = qs.filter(worker=worker)
        row = qs.values("attempts", "cancel_requested").first()
        if row is None:
            return None
        if row["cancel_requested"] and kind.model.CANCELLED_STATUS:
            _finish_cancelled(kind, job_id)
            return kind.model.CANCELLED_STATUS
        if row["attempts"] >= settings.JOB_MAX_ATTEMPTS:
            _fail_row(
                kind, job_id, error=_give_up_message(row["attempts"], reason), error_kind=ErrorKind.INFRASTRUCTURE
            )
            return kind.model.FAILED_STATUS
        _requeue_row(kind, job_id, reason=reason)
        return kind.model.QUEUED


def job_fail(
    kind: JobKind, job_id: int, *, error: str, error_kind: str, worker: str | None = None
) -> bool:
    """A running row ends failed with ``error``; ``worker``: only if the row is still that worker's."""
    with transaction.atomic():
        qs = kind.model.objects.select_for_update().filter(pk=job_id, status=kind.model.RUNNING)
        if worker is not None:
            qs = qs.filter(worker=worker)
        if not qs.exists():
            return False
        _fail_row(kind, job_id, error=error, error_kind=error_kind)
    return True


def job_cancel(kind: JobKind, job_id: int) -> Job:
    """Ask a job to stop: a queued row is cancelled at once; a running one stops at its next
    ``ctx.should_stop()`` (the job writes its own final state). A finished row is left as it is."""
    if not kind.model.CANCELLED_STATUS:
        raise ValueError(f"{kind.name} jobs cannot be cancelled")
    with transaction.atomic():
        job = kind.model.objects.select_for_update().get(pk=job_id)
        if job.is_finished:
            return job
        kind.model.objects.filter(pk=job_id).update(cancel_requested=True)
        if job.status == kind.model.QUEUED:
            _finish_cancelled(kind, job_id)
        else:
            kind.ring(job_id)
    return kind.model.objects.get(pk=job_id)


@dataclass(frozen=True)
class Claim:
    attempt: int  # 1 for the first claim; >1 when an earlier attempt died or was retried
    time_limit_s: int


def job_claim(kind: JobKind, job_id: int, *, worker: str) -> Claim | None:
    """Claim ``job_id`` for ``worker`` (see the module's docstring); None when there is nothing to run."""
    model = kind.model
    now = timezone.now()
    with transaction.atomic():
        row = (
            model.objects.select_for_update()
            .filter(pk=job_id)
            .values("status", "worker", "heartbeat", "started", "attempts", "cancel_requested", "time_limit_s")
            .first()
        )
        if row is None:
            return None
        dead = row["status"] == model.RUNNING and (
            is_silent(row["heartbeat"], row["started"]) or worker_is_dead_here(row["worker"])
        )
        if not (row["status"] == model.QUEUED or dead):
            return None  # finished, cancelled, or alive elsewhere
        if row["cancel_requested"] and model.CANCELLED_STATUS:
            _finish_cancelled(kind, job_id)
            return None
        if row["attempts"] >= settings.JOB_MAX_ATTEMPTS:
            reason = f"its worker {row['worker'] or '?'} stopped without an outcome"
            _fail_row(
                kind, job_id, error=_give_up_message(row["attempts"], reason), error_kind=ErrorKind.INFRASTRUCTURE
            )
            return None
        limit = int(kind.time_limit_s() if row["time_limit_s"] is None else row["time_limit_s"])
        model.objects.filter(pk=job_id).update(
            status=model.RUNNING,
            worker=worker,
            started=now,
            heartbeat=now,
            attempts=F("attempts") + 1,
            time_limit_s=limit,
            error="",
            error_kind=ErrorKind.NONE,
        )
        kind.ring(job_id)
    return Claim(attempt=row["attempts"] + 1, time_limit_s=limit)


# --- running one job ------------------------------------------------------------------------------


class JobContext:
    """What a running job may ask: its attempt, whether to stop, and whether it lost its row."""

    def __init__(self, *, kind: JobKind, job_id: int, worker: str, claim: Claim) -> None:
        self.kind = kind
        self.job_id = job_id
        self.worker = worker
        self.attempt = claim.attempt
        self.time_limit_s = claim.time_limit_s
        self._deadline = time.monotonic() + claim.time_limit_s
        self.lost = threading.Event()  # the row is no longer this worker's: stop, store nothing

    @property
    def resumed(self) -> bool:
        """A later attempt of a row an earlier attempt started (e.g. resume from a checkpoint)."""
        return self.attempt > 1

    def past_time_limit(self, grace_s: float = 0.0) -> bool:
        return time.monotonic() > self._deadline + grace_s

    def cancel_requested(self) -> bool:
        return self.kind.model.objects.filter(pk=self.job_id, cancel_requested=True).exists()

    def should_stop(self) -> bool:
        """Polled by the job between units of work (turns, steps)."""
        return self.lost.is_set() or self.past_time_limit() or self.cancel_requested()

    def time_limit_error(self) -> str:
        return f"the {self.kind.name} ran past its time limit of {self.time_limit_s} s"


class _Heartbeat(threading.Thread):
    def __init__(self, ctx: JobContext) -> None:
        super().__init__(name=f"heartbeat-{ctx.kind.name}-{ctx.job_id}", daemon=True)
        self.ctx = ctx
        self.done = threading.Event()

    def run(self) -> None:
        ctx, model = self.ctx, self.ctx.kind.model
        try:
            while not self.done.wait(float(settings.JOB_HEARTBEAT_S)):
                try:
                    if ctx.past_time_limit(grace_s=float(settings.JOB_STALE_AFTER_S)):
                        job_fail(
                            ctx.kind,
                            ctx.job_id,
                            error=ctx.time_limit_error() + " and did not stop",
                            error_kind=ErrorKind.INFRASTRUCTURE,
                            worker=ctx.worker,
                        )
                        ctx.lost.set()
                        return
                    beat = model.objects.filter(
                        pk=ctx.job_id, status=model.RUNNING, worker=ctx.worker
                    ).update(heartbeat=timezone.now())
                    if not beat:
                        ctx.lost.set()
                        return
                except Exception:  # the next beat tries again; a long outage makes the row stale
                    logger.warning("heartbeat of %s %s failed", ctx.kind.name, ctx.job_id, exc_info=True)
        finally:
            connections.close_all()  # this thread's own connections only

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=5)


def _still_ours(kind: JobKind, job_id: int, worker: str) -> bool:
    return (
        kind.model.objects.select_for_update()
        .filter(pk=job_id, status=kind.model.RUNNING, worker=worker)
        .exists()
    )


def _reread(kind: JobKind, job_id: int) -> Job | None:
    try:
        return kind.model.objects.get(pk=job_id)
    except RETRYABLE:
        return None


def job_run(
    kind: JobKind,
    job_id: int,
    *,
    execute: Callable[[JobContext], Any],
    store: Callable[[JobContext, Any], Any],
    before_fail: Callable[[JobContext, str], None] | None = None,
) -> Any:
    """Claim ``job_id``, run ``execute(ctx)`` with a heartbeat, then ``store(ctx, outcome)`` in one
    transaction that holds the row (everything the outcome implies, e.g. review flags, goes in it).

    Returns what ``store`` returned; the row when the attempt failed; None when there was nothing to
    run or the row went back to the queue. ``before_fail(ctx, error)`` runs before a failure is
    written (e.g. a rollout's error event).
    """
    worker = worker_id()
    claim = job_claim(kind, job_id, worker=worker)
    if claim is None:
        return None
    ctx = JobContext(kind=kind, job_id=job_id, worker=worker, claim=claim)
    heartbeat = _Heartbeat(ctx)
    heartbeat.start()
    try:
        try:
            outcome = execute(ctx)
        finally:
            heartbeat.stop()
    except RETRYABLE as exc:
        _retry_best_effort(ctx, f"the database went away: {exc}")
        return None
    except Exception as exc:
        if isinstance(exc, SoftTimeLimitExceeded):  # Celery's soft limit, set from the same numbers
            error, error_kind = ctx.time_limit_error(), ErrorKind.INFRASTRUCTURE
        else:
            logger.exception("%s %s failed", kind.name, job_id)
            error, error_kind = traceback.format_exc(), kind.execute_error_kind
        if before_fail is not None and not ctx.lost.is_set():
            before_fail(ctx, error)
        job_fail(kind, job_id, error=error, error_kind=error_kind, worker=worker)
        return _reread(kind, job_id)
    if ctx.lost.is_set():
        logger.warning("%s %s: the row is no longer this worker's; its outcome is dropped", kind.name, job_id)
        return None
    try:
        with transaction.atomic():
            if not _still_ours(kind, job_id, worker):
                logger.warning("%s %s was taken from this worker; its outcome is dropped", kind.name, job_id)
                return None
            stored = store(ctx, outcome)
            kind.ring(job_id)
    except Exception as exc:  # nothing of the outcome was written: run the job again (bounded)
        logger.exception("storing the outcome of %s %s failed", kind.name, job_id)
        _retry_best_effort(ctx, f"its outcome could not be stored: {exc!r}")
        return None
    return stored


def _retry_best_effort(ctx: JobContext, reason: str) -> None:
    """Back to the queue; if even that fails (the database is down), the row's heartbeat goes stale
    and the sweeper puts it back."""
    try:
        job_return_to_queue(ctx.kind, ctx.job_id, reason=reason, worker=ctx.worker)
    except RETRYABLE:
        logger.warning("could not requeue %s %s; the sweeper will", ctx.kind.name, ctx.job_id, exc_info=True)
