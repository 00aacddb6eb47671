"""Celery beat task (queue ``default``): the sweeper, every JOB_SWEEP_S (settings.CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

from celery import shared_task

from .sweeper import jobs_sweep


@shared_task(name="webapp.core.tasks.jobs_sweep_task", ignore_result=True)
def jobs_sweep_task() -> dict[str, dict[str, int]]:
    return jobs_sweep()
