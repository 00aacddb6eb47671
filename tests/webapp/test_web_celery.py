"""A real Celery worker on Redis runs a real evaluation end to end (integration)."""

from __future__ import annotations

import os
import signal
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import transaction
from django.utils import timezone

from tests.webapp.celery_broker import celery_worker, wait_finished
from webapp.arena import services
from webapp.arena.models import Evaluation
from webapp.core.sweeper import jobs_sweep

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

# A Redis database of its own, so teammates' workers on the default database never see these jobs.
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


@pytest.fixture
def celery_worker_process(settings, tmp_path):
    """``celery -A webapp worker -Q gpu`` as a subprocess, on the test database and a private Redis db."""
    log_path = tmp_path / "worker.log"
    extra = {"EVAL_BASELINES": "eager", "EVAL_TRIALS": "2", "KERNELCOURT_WARM_UP": "cpu"}
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


def test_a_worker_process_killed_mid_evaluation_loses_nothing(settings, tmp_path, make_silu_kernel):
    """SIGKILL the process running the job: the job goes back on the queue and a new process finishes it."""
    log_path = tmp_path / "worker.log"
    extra = {"EVAL_BASELINES": "eager", "EVAL_TRIALS": "2"}
    kernel = make_silu_kernel()
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
        wait_finished(evaluation, max(0.0, deadline - time.monotonic()))
        log = log_path.read_text()
        assert worker.poll() is None, log[-3000:]
    assert evaluation.status == "passed", (evaluation.status, evaluation.error, log[-3000:])
    assert evaluation.attempts == 2
    assert "WorkerLostError" in log or "exited prematurely" in log


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in _children(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def test_a_worker_killed_whole_mid_evaluation_has_its_row_swept_back_and_a_second_worker_finishes_it(
    settings, tmp_path, make_silu_kernel
):
    """SIGKILL the whole worker (its message stays unacknowledged on the broker for hours): the row's
    heartbeat goes stale, the sweeper puts it back in the queue and another worker finishes it."""
    settings.JOB_STALE_AFTER_S = 3  # the sweeper runs here, in the test process
    extra = {"EVAL_BASELINES": "eager", "EVAL_TRIALS": "2", "JOB_HEARTBEAT_S": "0.5", "JOB_STALE_AFTER_S": "3"}
    kernel = make_silu_kernel()
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with celery_worker(queue="gpu", redis_url=REDIS_URL, settings=settings, log_path=first_log, extra_env=extra) as first:
        evaluation = services.evaluation_request(kernel_id=kernel.pk, track="open")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and first.poll() is None:
            evaluation.refresh_from_db()
            if evaluation.status != "queued":
                break
            time.sleep(0.1)
        status_at_kill, first_worker = evaluation.status, evaluation.worker
        doomed = [first.pid, *_descendants(first.pid)]
        for pid in doomed:  # the worker and the sandbox processes of its evaluation
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        first.wait()
    assert status_at_kill == "running", (status_at_kill, first_log.read_text()[-3000:])
    assert first_worker == f"{socket.gethostname()}:{first.pid}"

    with celery_worker(queue="gpu", redis_url=REDIS_URL, settings=settings, log_path=second_log, extra_env=extra) as second:
        swept = {}
        deadline = time.monotonic() + 60
        # the sweeper's enqueue is published when this transaction commits: the row it wrote is read
        # first, before the second worker can claim it
        with transaction.atomic():
            while time.monotonic() < deadline and not swept:
                swept = jobs_sweep()  # in the team setup: the beat task, every JOB_SWEEP_S
                time.sleep(0.2)
            evaluation.refresh_from_db()
            requeued = (evaluation.status, evaluation.worker, evaluation.error)
        wait_finished(evaluation, 300, second)
        log = second_log.read_text()
        assert second.poll() is None, log[-3000:]

    assert swept == {"evaluation": {"queued": 1}}
    assert requeued[:2] == ("queued", "")
    assert requeued[2].startswith(f"its worker {first_worker} stopped sending heartbeats")
    assert evaluation.status == "passed", (evaluation.status, evaluation.error, log[-3000:])
    assert evaluation.attempts == 2
    assert evaluation.worker == f"{socket.gethostname()}:{second.pid}"


def test_celery_beat_sends_the_sweeper_and_a_dead_workers_row_goes_back_to_the_queue(
    settings, tmp_path, make_evaluation
):
    """The team setup's path: beat sends ``jobs_sweep_task`` every JOB_SWEEP_S to the ``default`` queue."""
    evaluation = make_evaluation(status="queued", hardware=None)
    dead = "gone-host.invalid:7"
    Evaluation.objects.filter(pk=evaluation.pk).update(
        status="running", worker=dead, attempts=1, heartbeat=timezone.now() - timedelta(minutes=5)
    )
    extra = {"JOB_SWEEP_S": "0.5", "JOB_STALE_AFTER_S": "3", "JOB_HEARTBEAT_S": "0.5"}
    log_path = tmp_path / "default.log"
    with celery_worker(queue="default", redis_url=REDIS_URL, settings=settings, log_path=log_path, extra_env=extra,
                       beat=True) as worker:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and worker.poll() is None:
            evaluation.refresh_from_db()
            if evaluation.status != "running":
                break
            time.sleep(0.2)
        log = log_path.read_text()
        assert worker.poll() is None, log[-3000:]

    assert (evaluation.status, evaluation.worker, evaluation.attempts) == ("queued", "", 1), log[-3000:]
    assert evaluation.error.startswith(f"its worker {dead} stopped sending heartbeats")
    assert "webapp.core.tasks.jobs_sweep_task" in log


def test_celery_worker_runs_a_real_evaluation(celery_worker_process, make_silu_kernel):
    worker, log_path = celery_worker_process
    kernel = make_silu_kernel()

    evaluation = wait_finished(services.evaluation_request(kernel_id=kernel.pk, track="open"), 400, worker)
    log = log_path.read_text()
    assert worker.poll() is None, log[-3000:]
    assert evaluation.status == "passed", (evaluation.status, evaluation.error, log[-3000:])
    assert evaluation.attempts == 1
    assert evaluation.started is not None and evaluation.finished >= evaluation.started
    assert evaluation.hardware.key.startswith("cpu:")
    assert "webapp.arena.tasks.evaluation_run_task" in log
    deadline = time.monotonic() + 120  # the warm-up ran beside the first evaluation (KERNELCOURT_WARM_UP=cpu)
    while "warmed up for cpu" not in log and "could not warm up" not in log and time.monotonic() < deadline:
        time.sleep(0.5)
        log = log_path.read_text()
    assert "Celery worker" in log and "warmed up for cpu: probe" in log, log[-3000:]
