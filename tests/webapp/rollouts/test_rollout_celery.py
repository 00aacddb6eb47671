"""A real Celery worker on the ``agent`` queue runs a rollout; its events reach a websocket client
through the Redis channel layer (integration: needs Redis at 127.0.0.1:6379)."""

from __future__ import annotations

import os

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from rollout_helpers import reply

from tests.webapp.celery_broker import celery_worker
from webapp.asgi import application
from webapp.rollouts import services
from webapp.rollouts.models import Rollout

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

# A Redis database of its own (the web tests use 13), so no other worker sees these jobs.
REDIS_URL = os.environ.get("TEST_ROLLOUT_REDIS_URL", "redis://127.0.0.1:6379/12")


@pytest.fixture
def agent_worker(settings, tmp_path):
    """``celery -A webapp worker -Q agent`` on the test database; the test process enqueues and
    listens through the same Redis."""
    log_path = tmp_path / "agent-worker.log"
    with celery_worker(queue="agent", redis_url=REDIS_URL, settings=settings, log_path=log_path,
                       redis_channel_layer=True) as worker:
        yield worker, log_path


def test_agent_worker_runs_a_rollout_and_streams_it_through_redis(agent_worker, relu_add_task, llm_server):
    worker, log_path = agent_worker
    server = llm_server([reply(f"turn {i}", delay=0.5) for i in range(3)])

    services.llm_endpoint_register(name="scripted", base_url=server.url, model="scripted")
    rollout = services.rollout_launch(
        task_id=relu_add_task.pk,
        submitter_name="celery-agent",
        endpoint="scripted",
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
