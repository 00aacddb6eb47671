"""A real Celery worker on Redis runs a real evaluation end to end (integration)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.webapp.celery_broker import celery_worker
from webapp.arena import services

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

ROOT = Path(__file__).resolve().parents[2]
# A Redis database of its own, so teammates' workers on the default database never see these jobs.
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")

SILU_OPEN = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
"""


def _redis_or_skip() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.exceptions.ConnectionError:
        pytest.skip(f"no Redis at {REDIS_URL}")


@pytest.fixture
def celery_worker_process(settings, tmp_path):
    """``celery -A webapp worker -Q gpu`` as a subprocess, on the test database and a private Redis db."""
    log_path = tmp_path / "worker.log"
    extra = {"EVAL_BASELINES": "eager", "EVAL_TRIALS": "2"}
    with celery_worker(queue="gpu", redis_url=REDIS_URL, settings=settings, log_path=log_path, extra_env=extra) as w:
        yield w, log_path


def test_celery_worker_runs_a_real_evaluation(celery_worker_process, make_task, make_kernel):
    worker, log_path = celery_worker_process
    task_source = (ROOT / "gpu_workers/suite/tasks/silu.py").read_text()
    kernel = make_kernel(task=make_task(name="silu", source=task_source), source=SILU_OPEN)

    evaluation = services.evaluation_request(kernel_id=kernel.pk, track="open")
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline and worker.poll() is None:
        evaluation.refresh_from_db()
        if evaluation.is_finished:
            break
        time.sleep(0.5)

    evaluation.refresh_from_db()
    log = log_path.read_text()
    assert worker.poll() is None, log[-3000:]
    assert evaluation.status == "passed", (evaluation.status, evaluation.error, log[-3000:])
    assert evaluation.attempts == 1
    assert evaluation.started is not None and evaluation.finished >= evaluation.started
    assert evaluation.hardware.key.startswith("cpu:")
    assert "webapp.arena.tasks.evaluation_run_task" in log
