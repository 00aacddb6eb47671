"""``/ws/rollouts/<id>/?after_seq=N``: backlog on connect, live events, resume without loss or
duplicates, lost doorbells, the end message; and once through the Redis channel layer."""

from __future__ import annotations

import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from agent import RolloutSummary
from webapp.asgi import application
from webapp.core.events import RING_TYPE, _ring_now
from webapp.rollouts import services
from webapp.rollouts.doorbell import rollout_group
from webapp.rollouts.models import RolloutEvent

pytestmark = pytest.mark.django_db(transaction=True)


async def _events(communicator: WebsocketCommunicator, n: int, timeout: float = 5) -> list[int]:
    """The seqs of the next n event messages (state messages are skipped)."""
    seqs: list[int] = []
    while len(seqs) < n:
        message = await communicator.receive_json_from(timeout=timeout)
        if message["type"] == "event":
            seqs.append(message["event"]["seq"])
        else:
            assert message["type"] == "state", message
    return seqs


async def _until_end(communicator: WebsocketCommunicator, timeout: float = 5) -> tuple[list[int], dict]:
    seqs: list[int] = []
    while True:
        message = await communicator.receive_json_from(timeout=timeout)
        if message["type"] == "event":
            seqs.append(message["event"]["seq"])
        elif message["type"] == "end":
            return seqs, message


def _finish(rollout_id: int) -> None:
    services.rollout_claim(rollout_id=rollout_id)
    last = services.selectors.rollout_last_seq(rollout_id=rollout_id)
    services.rollout_finish(
        rollout_id=rollout_id,
        summary=RolloutSummary(
            rollout_id=str(rollout_id),
            stop_reason="max_turns",
            turns=3,
            evaluations=0,
            prompt_tokens=30,
            completion_tokens=15,
            elapsed_s=1.0,
            last_seq=last,
        ),
    )


def test_late_connect_receives_the_backlog(make_rollout, store_events):
    rollout = make_rollout(status="running")
    store_events(rollout.pk, range(5))

    async def scenario():
        everything = WebsocketCommunicator(application, f"/ws/rollouts/{rollout.pk}/")
        connected, _ = await everything.connect()
        all_seqs = await _events(everything, 5)
        await everything.disconnect()
        tail = WebsocketCommunicator(application, f"/ws/rollouts/{rollout.pk}/?after_seq=2")
        await tail.connect()
        tail_seqs = await _events(tail, 2)
        state = await tail.receive_json_from(timeout=5)
        nothing_more = await tail.receive_nothing(timeout=0.3)
        await tail.disconnect()
        return connected, all_seqs, tail_seqs, state, nothing_more

    connected, all_seqs, tail_seqs, state, nothing_more = async_to_sync(scenario)()

    assert connected is True
    assert all_seqs == [0, 1, 2, 3, 4]
    assert tail_seqs == [3, 4]
    assert (state["type"], state["state"]["status"]) == ("state", "running")
    assert nothing_more is True


def test_live_events_then_end(make_rollout, store_events):
    rollout = make_rollout()

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/rollouts/{rollout.pk}/?after_seq=-1")
        await communicator.connect()
        first = await communicator.receive_json_from(timeout=5)  # the queued state
        await database_sync_to_async(store_events)(rollout.pk, range(3))
        live = await _events(communicator, 3)
        await database_sync_to_async(_finish)(rollout.pk)
        rest, end = await _until_end(communicator)
        closed = await communicator.receive_output(timeout=5)
        return first, live, rest, end, closed

    first, live, rest, end, closed = async_to_sync(scenario)()

    assert (first["type"], first["state"]["status"]) == ("state", "queued")
    assert live == [0, 1, 2]
    assert rest == []
    assert end["state"]["status"] == "succeeded"
    assert end["state"]["finished"] is True
    assert end["last_seq"] == 2
    assert closed["type"] == "websocket.close"


def test_reconnect_with_after_seq_misses_nothing_and_repeats_nothing(make_rollout, store_events):
    rollout = make_rollout(status="running")
    store_events(rollout.pk, range(3))

    async def scenario():
        first = WebsocketCommunicator(application, f"/ws/rollouts/{rollout.pk}/")
        await first.connect()
        seen = await _events(first, 3)
        await first.disconnect()
        # the rollout goes on while the client is away
        await database_sync_to_async(store_events)(rollout.pk, range(3, 6))
        second = WebsocketCommunicator(application, f"/ws/rollouts/{rollout.pk}/?after_seq={seen[-1]}")
        await second.connect()
        seen += await _events(second, 3)
        await database_sync_to_async(store_events)(rollout.pk, range(6, 8))
        seen += await _events(second, 2)
        await database_sync_to_async(_finish)(rollout.pk)
        rest, end = await _until_end(second)
        await second.disconnect()
        return seen + rest, end

    seen, end = async_to_sync(scenario)()

    assert seen == list(range(8))
    assert end["last_seq"] == 7


def test_lost_and_coalesced_doorbells_lose_nothing(make_rollout):
    rollout = make_rollout(status="running")

    async def scenario():
        communicator = WebsocketCommunicator(application, f"/ws/rollouts/{rollout.pk}/")
        await communicator.connect()
        await communicator.receive_json_from(timeout=5)  # state

        def store_silently(seqs):  # rows without rings (as if every ring were dropped)
            for seq in seqs:
                RolloutEvent.objects.create(
                    rollout_id=rollout.pk, seq=seq, kind="assistant", content=str(seq)
                )

        await database_sync_to_async(store_silently)(range(4))
        await database_sync_to_async(_ring_now)(rollout_group(rollout.pk), {"type": RING_TYPE, "seq": 3})  # one ring, four rows
        coalesced = await _events(communicator, 4, timeout=1.5)  # faster than the safety poll
        await database_sync_to_async(store_silently)(range(4, 6))
        polled = await _events(communicator, 2, timeout=10)  # no ring at all: the poll finds them
        await communicator.disconnect()
        return coalesced, polled

    coalesced, polled = async_to_sync(scenario)()

    assert coalesced == [0, 1, 2, 3]
    assert polled == [4, 5]


def test_unknown_rollout_is_refused():
    async def scenario():
        communicator = WebsocketCommunicator(application, "/ws/rollouts/987654/")
        return await communicator.connect()

    assert async_to_sync(scenario)() == (False, 4404)


@pytest.mark.integration
def test_events_through_the_redis_channel_layer(make_rollout, store_events, settings):
    redis = pytest.importorskip("redis")
    try:
        redis.Redis.from_url("redis://127.0.0.1:6379/0", socket_connect_timeout=1).ping()
    except Exception as exc:
        pytest.skip(f"no Redis at 127.0.0.1:6379: {exc}")
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": ["redis://127.0.0.1:6379/0"],
                "prefix": f"test-rollouts-{uuid.uuid4().hex[:8]}",
            },
        }
    }
    from channels.layers import channel_layers, get_channel_layer

    rollout = make_rollout(status="running")

    async def scenario():
        layer = get_channel_layer()
        communicator = WebsocketCommunicator(application, f"/ws/rollouts/{rollout.pk}/")
        await communicator.connect()
        await communicator.receive_json_from(timeout=5)  # state
        await database_sync_to_async(store_events)(rollout.pk, range(3))
        live = await _events(communicator, 3, timeout=1.5)  # rung through Redis, before the safety poll
        await database_sync_to_async(_finish)(rollout.pk)
        rest, end = await _until_end(communicator)
        await communicator.disconnect()
        await layer.flush()
        return type(layer).__name__, live + rest, end

    try:
        layer_name, seqs, end = async_to_sync(scenario)()
    finally:
        channel_layers.backends.clear()

    assert layer_name == "RedisChannelLayer"
    assert seqs == [0, 1, 2]
    assert end["state"]["status"] == "succeeded"
