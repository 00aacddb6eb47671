"""Celery task (queue ``gpu``: training needs the accelerator): a thin wrapper around the service."""

from __future__ import annotations

from celery import shared_task

from . import conf, services


@shared_task(
    name="webapp.training_runs.tasks.training_run_task",
    acks_late=True,  # a killed pool process puts it back; the runner re-claims the row once its worker is dead
    reject_on_worker_lost=True,
    soft_time_limit=conf.soft_time_limit_s(),
    time_limit=conf.soft_time_limit_s() + 600,
    ignore_result=True,  # retries are the runner's (bounded by JOB_MAX_ATTEMPTS), not Celery's
)
def training_run_task(run_id: int) -> str | None:
    run = services.training_run_execute(run_id=run_id)
    return run.status if run is not None else None
