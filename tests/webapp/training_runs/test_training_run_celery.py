"""A real Celery worker on the ``gpu`` queue runs a tiny training run; its steps reach a websocket
client through the Redis channel layer (integration: needs Redis at 127.0.0.1:6379)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from conftest import tiny_overrides
from django.db import connection

from webapp.asgi import application
from webapp.training_runs import services
from webapp.training_runs.models import TrainingCheckpoint, TrainingMetric

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

ROOT = Path(__file__).resolve().parents[3]
# A Redis database of its own (web tests use 13, rollouts 12), so no other worker sees these jobs.
REDIS_URL = os.environ.get("TEST_TRAINING_REDIS_URL", "redis://127.0.0.1:6379/11")


@pytest.fixture
def gpu_worker(settings, runs_dir, tmp_path):
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
    except redis.exceptions.ConnectionError:
        pytest.skip(f"no Redis at {REDIS_URL}")
    redis.Redis.from_url(REDIS_URL).flushdb()
    db = connection.settings_dict
    env = {
        **{k: v for k, v in os.environ.items() if k != "JOB_BACKEND"},
        "DJANGO_SETTINGS_MODULE": "webapp.settings.local",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": REDIS_URL,
        "TRAINING_RUNS_DIR": str(runs_dir),
        "DEBUG": "0",
    }
    log_path = tmp_path / "gpu-worker.log"
    log = log_path.open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", "gpu", "-P", "solo", "-c", "1",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    from channels.layers import channel_layers

    from webapp.celery import app

    old_broker = app.conf.broker_url
    app.conf.broker_url = REDIS_URL
    app._pool = None
    settings.JOB_BACKEND = "celery"
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
    try:
        yield worker, log_path
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
        app.conf.broker_url = old_broker
        app._pool = None
        channel_layers.backends.clear()


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
