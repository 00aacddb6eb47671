"""A real Celery worker on the ``gpu`` queue runs a tiny training run; its steps reach a websocket
client through the Redis channel layer (integration: needs Redis at 127.0.0.1:6379)."""

from __future__ import annotations

import os

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from training_run_helpers import tiny_overrides

from tests.webapp.celery_broker import celery_worker
from webapp.asgi import application
from webapp.training_runs import services
from webapp.training_runs.models import TrainingCheckpoint, TrainingMetric

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

# A Redis database of its own (web tests use 13, rollouts 12), so no other worker sees these jobs.
REDIS_URL = os.environ.get("TEST_TRAINING_REDIS_URL", "redis://127.0.0.1:6379/11")


@pytest.fixture
def gpu_worker(settings, runs_dir, tmp_path):
    log_path = tmp_path / "gpu-worker.log"
    with celery_worker(queue="gpu", redis_url=REDIS_URL, settings=settings, log_path=log_path,
                       extra_env={"TRAINING_RUNS_DIR": str(runs_dir)}, redis_channel_layer=True) as worker:
        yield worker, log_path


def test_gpu_worker_trains_and_streams_steps_through_redis(gpu_worker, tiny_config):
    worker, log_path = gpu_worker

    run = services.training_run_launch(name="celery", config=tiny_config, overrides=tiny_overrides(steps=3))

    async def listen():
        communicator = WebsocketCommunicator(application, f"/ws/training/{run.pk}/?after_step=0")
        await communicator.connect()
        steps: list[int] = []
        while True:
            message = await communicator.receive_json_from(timeout=180)
            if message["type"] == "metrics":
                steps.append(message["metrics"]["step"])
            elif message["type"] == "end":
                await communicator.disconnect()
                return steps, message

    steps, end = async_to_sync(listen)()

    run.refresh_from_db()
    log = log_path.read_text()
    assert worker.poll() is None, log[-3000:]
    assert (run.status, run.step, run.attempts) == ("succeeded", 3, 1), run.error
    assert steps == [1, 2, 3]
    assert end["state"]["status"] == "succeeded"
    assert list(TrainingMetric.objects.filter(run=run).values_list("step", flat=True)) == [1, 2, 3]
    assert TrainingCheckpoint.objects.filter(run=run).count() == 3
    assert "webapp.training_runs.tasks.training_run_task" in log
