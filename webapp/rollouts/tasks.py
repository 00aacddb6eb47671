"""Celery task (queue ``agent``): a thin wrapper that passes the id to the service."""

from __future__ import annotations

from celery import shared_task
from django.db import InterfaceError, OperationalError

from . import conf, services


@shared_task(
    name="webapp.rollouts.tasks.rollout_run_task",
    acks_late=True,  # a lost worker's rollout is redelivered; rollout_claim re-runs it only once stale
    reject_on_worker_lost=True,
    soft_time_limit=conf.soft_time_limit_s(),
    time_limit=conf.soft_time_limit_s() + 300,
    autoretry_for=(OperationalError, InterfaceError),  # only what a retry can fix
    retry_backoff=True,
    max_retries=3,
    ignore_result=True,
)
def rollout_run_task(rollout_id: int, api_key: str | None = None) -> str | None:
    rollout = services.rollout_run(rollout_id=rollout_id, api_key=api_key)
    return rollout.status if rollout is not None else None
