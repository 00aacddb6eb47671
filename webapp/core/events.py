"""Events, exactly once: a generic doorbell and a websocket consumer that resumes after a cursor.

Writers store an event row with an increasing ``seq`` (in its own transaction) and then ``ring`` the
object's channel-layer group with that seq; the ring only says "look again". ``ResumeConsumer``
always reads the database for rows after the last seq it sent, so a lost, late or coalesced ring
never loses or repeats an event, and a slow poll covers rings that never come (e.g. across threads
with the in-memory layer). Clients reconnect with ``?<cursor_param>=<last seq they rendered>``.

Rollouts, training runs and evaluations all ring through here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.db import transaction

logger = logging.getLogger(__name__)

RING_TYPE = "events.ring"  # handled by ResumeConsumer.events_ring


def _ring_now(group: str, message: dict[str, Any]) -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # a doorbell that fails must never fail the job
        logger.warning("could not ring %s", group, exc_info=True)


def ring(*, group: str, seq: int | None = None, message: dict[str, Any] | None = None) -> None:
    """Ring ``group`` once the current transaction commits (at once outside a transaction).
    ``seq``: the newest stored event (None: only the state changed); ``message`` replaces the
    default ``{"type": RING_TYPE, "seq": seq}`` for consumers with their own handler."""
    payload = message if message is not None else {"type": RING_TYPE, "seq": seq}
    transaction.on_commit(lambda: _ring_now(group, payload))


class ResumeConsumer(AsyncJsonWebsocketConsumer):
    """Sends the stored events after the client's cursor, then new ones as they are stored, a
    ``state`` message whenever the state changes, and ``{"type": "end", …}`` (then closes) once the
    state says ``finished`` and every event has been sent.

    Subclasses set ``url_kwarg``, ``cursor_param``, ``event_type`` and implement the three sync
    readers ``group_for``, ``read_state`` and ``read_after``.
    """

    url_kwarg = "id"
    cursor_param = "after_seq"
    event_type = "event"
    batch = 200
    max_per_catch_up = 2000
    poll_s = 2.0

    # -- what a subclass provides (sync; run in a thread) ------------------------------------------
    def group_for(self, object_id: int) -> str:
        raise NotImplementedError

    def read_state(self, object_id: int) -> dict[str, Any] | None:
        """The object's state (must hold ``finished``), None when it does not exist."""
        raise NotImplementedError

    def read_after(self, object_id: int, after: int, limit: int) -> list[dict[str, Any]]:
        """At most ``limit`` event payloads with ``seq`` > after, in seq order."""
        raise NotImplementedError

    # -- machinery -----------------------------------------------------------------------------------
    def _cursor(self) -> int:
        query = parse_qs((self.scope.get("query_string") or b"").decode("latin-1"))
        try:
            return max(-1, int(query.get(self.cursor_param, ["-1"])[-1]))
        except ValueError:
            return -1

    def _read(self, after: int) -> tuple[dict | None, list[dict], bool]:
        """(state, events after ``after``, complete). The state is read first: if it says finished,
        every event was stored before it, so the events read next are all of them."""
        state = self.read_state(self.object_id)
        if state is None:
            return None, [], True
        events: list[dict] = []
        while len(events) < self.max_per_catch_up:
            rows = self.read_after(self.object_id, after, self.batch)
            events.extend(rows)
            if len(rows) < self.batch:
                return state, events, True
            after = rows[-1]["seq"]
        return state, events, False

    async def connect(self) -> None:
        self.object_id = int(self.scope["url_route"]["kwargs"][self.url_kwarg])
        self.last_seq = self._cursor()
        self.ended = False
        self.last_state: dict | None = None
        self.poller: asyncio.Task | None = None
        self.lock = asyncio.Lock()
        self.group = self.group_for(self.object_id)
        if await database_sync_to_async(self.read_state)(self.object_id) is None:
            await self.close(code=4404)
            return
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self.catch_up()
        if not self.ended:
            self.poller = asyncio.ensure_future(self.poll())

    async def disconnect(self, code: int) -> None:
        if getattr(self, "poller", None) is not None:
            self.poller.cancel()
        if hasattr(self, "lock"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def events_ring(self, message: dict) -> None:
        seq = message.get("seq")
        if seq is not None and seq <= self.last_seq:
            return  # already sent
        await self.catch_up()

    async def poll(self) -> None:
        while not self.ended:
            await asyncio.sleep(self.poll_s)
            await self.catch_up()

    async def catch_up(self) -> None:
        async with self.lock:
            if self.ended:
                return
            state, events, complete = await database_sync_to_async(self._read)(self.last_seq)
            for event in events:
                await self.send_json({"type": self.event_type, self.event_type: event})
                self.last_seq = event["seq"]
            if state is None or (complete and state["finished"]):
                self.ended = True
                await self.send_json({"type": "end", "state": state, "last_seq": self.last_seq})
                await self.close()
            elif state != self.last_state:
                await self.send_json({"type": "state", "state": state})
            self.last_state = state
