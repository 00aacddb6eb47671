"""Celery tasks: thin wrappers that pass ids to services (queue ``gpu``)."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from . import services


@shared_task(
    name="webapp.arena.tasks.evaluation_run_task",
    # a killed pool process puts the message back; webapp.core.runner re-claims the row once its
    # worker is known dead, and the sweeper requeues rows of a worker killed whole
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=settings.EVAL_SOFT_TIME_LIMIT_S,
    time_limit=settings.EVAL_TIME_LIMIT_S,
    ignore_result=True,  # retries are the runner's (bounded by JOB_MAX_ATTEMPTS), not Celery's
)
def evaluation_run_task(evaluation_id: int) -> str | None:
    evaluation = services.evaluation_run(evaluation_id=evaluation_id)
    return evaluation.status if evaluation is not None else None
