"""Celery task (queue ``gpu``: training needs the accelerator): a thin wrapper around the service."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from . import conf, services


@shared_task(
    name="webapp.training_runs.tasks.training_run_task",
    acks_late=True,  # a lost worker's run is redelivered; the claim re-runs it (resuming) only once stale
    reject_on_worker_lost=True,
    soft_time_limit=conf.soft_time_limit_s(),
    time_limit=conf.soft_time_limit_s() + 600,
    autoretry_for=(OperationalError, InterfaceError),  # only what a retry can fix
    retry_backoff=True,
    max_retries=3,
    ignore_result=True,
)
def training_run_task(run_id: int) -> str | None:
    run = services.training_run_execute(run_id=run_id)
    return run.status if run is not None else None
