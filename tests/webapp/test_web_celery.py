"""A real Celery worker on Redis runs a real evaluation end to end (integration)."""

from __future__ import annotations

import os
import signal
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


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_worker_process_killed_mid_evaluation_loses_nothing(settings, tmp_path, make_task, make_kernel):
    """SIGKILL the process running the job: the job goes back on the queue and a new process finishes it."""
    log_path = tmp_path / "worker.log"
    extra = {"EVAL_BASELINES": "eager", "EVAL_TRIALS": "2"}
    task_source = (ROOT / "gpu_workers/suite/tasks/silu.py").read_text()
    kernel = make_kernel(task=make_task(name="silu", source=task_source), source=SILU_OPEN)
    with celery_worker(queue="gpu", redis_url=REDIS_URL, settings=settings, log_path=log_path, extra_env=extra,
                       pool="prefork") as worker:
        evaluation = services.evaluation_request(kernel_id=kernel.pk, track="open")
        deadline = time.monotonic() + 300
        killed = None
        while time.monotonic() < deadline and killed is None:
            evaluation.refresh_from_db()
            if evaluation.status == "running":
                children = _children(worker.pid)
                if children:
                    killed = children[0]
                    os.kill(killed, signal.SIGKILL)  # mid-evaluation: its sandbox children die with it
            time.sleep(0.2)
        assert killed is not None, log_path.read_text()[-3000:]
        while time.monotonic() < deadline:
            evaluation.refresh_from_db()
            if evaluation.is_finished:
                break
            time.sleep(0.5)
        log = log_path.read_text()
        assert worker.poll() is None, log[-3000:]
    assert evaluation.status == "passed", (evaluation.status, evaluation.error, log[-3000:])
    assert evaluation.attempts == 2
    assert "WorkerLostError" in log or "exited prematurely" in log


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
