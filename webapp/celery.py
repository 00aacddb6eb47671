"""The Celery app (``celery -A webapp worker -Q gpu``); settings come from Django's CELERY_* names."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")

app = Celery("webapp", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_init.connect
def _warm_up_evaluator(**_: object) -> None:
    """A pool process of a worker started with KERNELARENA_WARM_UP=cuda (the gpu queue's) starts its
    zygote and loads the light-build bridge now, in the background, not in its first evaluation."""
    from gpu_workers.warmup import configured_device, warm_up_in_background

    device = configured_device()
    if device:
        warm_up_in_background(device, who="Celery worker process")
