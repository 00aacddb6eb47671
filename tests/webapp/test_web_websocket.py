"""``/ws/evaluations/<id>/``: the state on connect, and again when the job rings the doorbell."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from webapp.arena import services
from webapp.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)


def test_websocket_sends_the_state_then_each_change(make_evaluation):
    evaluation = make_evaluation(status="queued", hardware=None)

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/evaluations/{evaluation.pk}/")
        connected, _ = await communicator.connect()
        first = await communicator.receive_json_from(timeout=5)
        await database_sync_to_async(services.evaluation_claim)(evaluation_id=evaluation.pk)
        second = await communicator.receive_json_from(timeout=5)
        await communicator.disconnect()
        return connected, first, second

    connected, first, second = async_to_sync(scenario)()

    assert connected is True
    assert (first["id"], first["status"], first["finished"]) == (evaluation.pk, "queued", False)
    assert (second["status"], second["finished"]) == ("running", False)


def test_websocket_for_an_unknown_evaluation_is_refused():
    async def scenario():
        communicator = WebsocketCommunicator(application, "/ws/evaluations/987654/")
        return await communicator.connect()

    connected, code = async_to_sync(scenario)()

    assert (connected, code) == (False, 4404)
