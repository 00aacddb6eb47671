"""Celery task (queue ``agent``): a thin wrapper that passes the id to the service."""

from __future__ import annotations

from celery import shared_task

from . import conf, services


@shared_task(
    name="webapp.rollouts.tasks.rollout_run_task",
    acks_late=True,  # a killed pool process puts it back; the runner re-claims the row once its worker is dead
    reject_on_worker_lost=True,
    soft_time_limit=conf.soft_time_limit_s(),
    time_limit=conf.soft_time_limit_s() + 300,
    ignore_result=True,  # retries are the runner's (bounded by JOB_MAX_ATTEMPTS), not Celery's
)
def rollout_run_task(rollout_id: int, api_key: str | None = None) -> str | None:
    rollout = services.rollout_run(rollout_id=rollout_id, api_key=api_key)
    return rollout.status if rollout is not None else None
