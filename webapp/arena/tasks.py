"""Celery tasks: thin wrappers that pass ids to services (queue ``gpu``)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from . import services


@shared_task(
    name="webapp.arena.tasks.evaluation_run_task",
    acks_late=True,
    reject_on_worker_lost=True,  # a killed worker puts the job back; the row stays 'running' until re-claimed
    soft_time_limit=settings.EVAL_SOFT_TIME_LIMIT_S,
    time_limit=settings.EVAL_TIME_LIMIT_S,
    # Retry only what a retry can fix (the database went away); a kernel verdict is never an error.
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=True,
    max_retries=3,
    ignore_result=True,
)
def evaluation_run_task(evaluation_id: int) -> str | None:
    evaluation = services.evaluation_run(evaluation_id=evaluation_id)
    return evaluation.status if evaluation is not None else None
