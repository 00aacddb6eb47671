"""``/ws/training/<id>/?after_step=N``: late connect gets the backlog, resume misses nothing and
repeats nothing, live steps, the end message."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from training_run_helpers import store_step

from webapp.asgi import application
from webapp.training_runs import services

pytestmark = pytest.mark.django_db(transaction=True)


async def _steps(communicator: WebsocketCommunicator, n: int, timeout: float = 5) -> list[int]:
    steps: list[int] = []
    while len(steps) < n:
        message = await communicator.receive_json_from(timeout=timeout)
        if message["type"] == "metrics":
            assert message["metrics"]["seq"] == message["metrics"]["step"]
            steps.append(message["metrics"]["step"])
        else:
            assert message["type"] == "state", message
    return steps


async def _until_end(communicator: WebsocketCommunicator, timeout: float = 5) -> tuple[list[int], dict]:
    steps: list[int] = []
    while True:
        message = await communicator.receive_json_from(timeout=timeout)
        if message["type"] == "metrics":
            steps.append(message["metrics"]["step"])
        elif message["type"] == "end":
            return steps, message


def _finish(run_id: int, step: int) -> None:
    services.training_run_finish(run_id=run_id, status="completed", step=step)


def test_late_connect_receives_the_backlog(make_run):
    run = make_run(steps=4)

    async def scenario():
        everything = WebsocketCommunicator(application, f"/ws/training/{run.pk}/")
        connected, _ = await everything.connect()
        all_steps = await _steps(everything, 4)
        await everything.disconnect()
        tail = WebsocketCommunicator(application, f"/ws/training/{run.pk}/?after_step=2")
        await tail.connect()
        tail_steps = await _steps(tail, 2)
        state = await tail.receive_json_from(timeout=5)
        nothing_more = await tail.receive_nothing(timeout=0.3)
        await tail.disconnect()
        return connected, all_steps, tail_steps, state, nothing_more

    connected, all_steps, tail_steps, state, nothing_more = async_to_sync(scenario)()

    assert connected is True
    assert all_steps == [1, 2, 3, 4]
    assert tail_steps == [3, 4]
    assert state["type"] == "state"
    assert (state["state"]["status"], state["state"]["step"], state["state"]["last_sample_step"]) == (
        "running",
        4,
        4,
    )
    assert nothing_more is True


def test_resume_with_after_step_misses_nothing_and_repeats_nothing(make_run):
    run = make_run(steps=3)

    async def scenario():
        first = WebsocketCommunicator(application, f"/ws/training/{run.pk}/?after_step=0")
        await first.connect()
        seen = await _steps(first, 3)
        await first.disconnect()
        for step in range(4, 7):  # the run goes on while the client is away
            await database_sync_to_async(store_step)(run.pk, step)
        second = WebsocketCommunicator(application, f"/ws/training/{run.pk}/?after_step={seen[-1]}")
        await second.connect()
        seen += await _steps(second, 3)
        for step in range(7, 9):  # and live while it is connected
            await database_sync_to_async(store_step)(run.pk, step)
        seen += await _steps(second, 2)
        await database_sync_to_async(_finish)(run.pk, 8)
        rest, end = await _until_end(second)
        closed = await second.receive_output(timeout=5)
        return seen + rest, end, closed

    seen, end, closed = async_to_sync(scenario)()

    assert seen == [1, 2, 3, 4, 5, 6, 7, 8]
    assert end["last_seq"] == 8
    assert (end["state"]["status"], end["state"]["finished"]) == ("succeeded", True)
    assert closed["type"] == "websocket.close"


def test_a_finished_run_sends_everything_then_ends(make_run):
    run = make_run(steps=2, status="succeeded")

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/training/{run.pk}/?after_step=0")
        await communicator.connect()
        return await _until_end(communicator)

    steps, end = async_to_sync(scenario)()

    assert steps == [1, 2]
    assert end["state"]["status"] == "succeeded"


def test_unknown_run_is_refused():
    async def scenario():
        communicator = WebsocketCommunicator(application, "/ws/training/987654/")
        return await communicator.connect()

    assert async_to_sync(scenario)() == (False, 4404)


def test_the_streamed_state_shows_the_error_to_its_owner_only(make_run, django_user_model):
    from django.test import Client

    owner = django_user_model.objects.create_user(username="owner", password="x")
    django_user_model.objects.create_user(username="other", password="x")
    run = make_run(
        status="failed",
        created_by=owner,
        error='  File "/srv/app/training/runner.py", line 3\nValueError: no',
    )

    def cookie(username: str | None) -> list[tuple[bytes, bytes]]:
        if username is None:
            return []
        client = Client()
        client.force_login(django_user_model.objects.get(username=username))
        return [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]

    headers = {name: cookie(name) for name in ("owner", "other", None)}

    async def end_state(extra):
        communicator = WebsocketCommunicator(application, f"/ws/training/{run.pk}/", headers=extra)
        await communicator.connect()
        _, end = await _until_end(communicator)
        await communicator.disconnect()
        return end["state"]["error"]

    seen = {name: async_to_sync(end_state)(extra) for name, extra in headers.items()}

    assert seen == {"owner": '  File "…/runner.py", line 3\nValueError: no', "other": "", None: ""}
