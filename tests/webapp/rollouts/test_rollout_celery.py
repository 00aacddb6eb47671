"""A real Celery worker on the ``agent`` queue runs a rollout; its events reach a websocket client
through the Redis channel layer (integration: needs Redis at 127.0.0.1:6379)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.db import connection
from rollout_helpers import reply

from webapp.asgi import application
from webapp.rollouts import services
from webapp.rollouts.models import Rollout

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

ROOT = Path(__file__).resolve().parents[3]
# A Redis database of its own (the web tests use 13), so no other worker sees these jobs.
REDIS_URL = os.environ.get("TEST_ROLLOUT_REDIS_URL", "redis://127.0.0.1:6379/12")


@pytest.fixture
def agent_worker(settings, tmp_path):
    """``celery -A webapp worker -Q agent`` on the test database; the test process enqueues and
    listens through the same Redis."""
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
        "DEBUG": "0",
    }
    log = (tmp_path / "agent-worker.log").open("w")
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "webapp",
            "worker",
            "-Q",
            "agent",
            "-P",
            "solo",
            "-c",
            "1",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "info",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
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
        yield worker, tmp_path / "agent-worker.log"
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


def test_agent_worker_runs_a_rollout_and_streams_it_through_redis(agent_worker, relu_add_task, llm_server):
    worker, log_path = agent_worker
    server = llm_server([reply(f"turn {i}", delay=0.5) for i in range(3)])

    rollout = services.rollout_launch(
        task_id=relu_add_task.pk,
        submitter_name="celery-agent",
        base_url=server.url,
        model="scripted",
        settings={"max_turns": 3, "track": "open", "device": "cpu"},
    )

    async def listen():
        communicator = WebsocketCommunicator(application, f"/ws/rollouts/{rollout.pk}/")
        await communicator.connect()
        seqs: list[int] = []
        while True:
            message = await communicator.receive_json_from(timeout=120)
            if message["type"] == "event":
                seqs.append(message["event"]["seq"])
            elif message["type"] == "end":
                await communicator.disconnect()
                return seqs, message

    seqs, end = async_to_sync(listen)()

    rollout.refresh_from_db()
    log = log_path.read_text()
    assert worker.poll() is None, log[-3000:]
    assert (rollout.status, rollout.stop_reason, rollout.turns, rollout.attempts) == (
        "succeeded",
        "max_turns",
        3,
        1,
    )
    assert seqs == list(range(rollout.events.count()))
    assert end["state"]["status"] == "succeeded"
    assert "webapp.rollouts.tasks.rollout_run_task" in log
    assert Rollout.objects.filter(pk=rollout.pk, status="succeeded").exists()
