"""The Celery app (``celery -A webapp worker -Q gpu``); settings come from Django's CELERY_* names."""

from __future__ import annotations

import os
import sys

from celery import Celery
from celery.signals import worker_init, worker_process_init

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")

app = Celery("webapp", task_cls="celery.contrib.django.task:DjangoTask")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


_warmed_up_pid: int | None = None


def _warm_up_evaluator(who: str) -> None:
    """Start the zygote and load the light-build bridge now, in the background, not in the first
    evaluation, when the worker was started with KERNELCOURT_WARM_UP=cuda (the gpu queue's) or cpu.
    Once per process: the solo pool sends worker_process_init in the worker's own process too."""
    global _warmed_up_pid
    if _warmed_up_pid == os.getpid():
        return
    _warmed_up_pid = os.getpid()
    from gpu_workers.workers.warmup import configured_device, warm_up_in_background

    try:
        device = configured_device()
    except ValueError as exc:  # a typo must not keep the worker from serving
        print(f"[kernelcourt] no warm-up: {exc}", file=sys.stderr, flush=True)
        return
    if device:
        from django.conf import settings

        from gpu_workers.judge import limit_threads

        limit_threads()  # the node's other evaluation processes judge at the same time
        # a prefork process runs one evaluation at a time, on any of the EVAL_GPUS (services.evaluation_gpu)
        gpus = range(settings.EVAL_GPUS) if device == "cuda" else None
        warm_up_in_background(device, who=who, references=1, gpus=gpus)


@worker_process_init.connect
def _warm_up_pool_process(**_: object) -> None:
    _warm_up_evaluator("Celery pool process")  # prefork: evaluations run in the pool's processes


@worker_init.connect
def _warm_up_worker(sender: object = None, **_: object) -> None:
    pool = str(getattr(sender, "pool_cls", "")).lower()
    if "solo" in pool or "thread" in pool:  # these pools run evaluations in the worker's own process
        _warm_up_evaluator("Celery worker")
