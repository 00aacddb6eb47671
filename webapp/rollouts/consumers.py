"""``/ws/rollouts/<id>/?after_seq=N``: the stored events after N, then new ones as they are stored,
then ``{"type": "end"}`` once the rollout has finished.

Every send reads the database (events after the last seq this connection sent), so a ring that is
lost, late or coalesced never loses or repeats an event; a slow poll covers lost rings.
"""

from __future__ import annotations

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import selectors
from .doorbell import rollout_group

BATCH = 200
MAX_PER_CATCH_UP = 2000
POLL_S = 2.0


def _after_seq(scope: dict) -> int:
    query = parse_qs((scope.get("query_string") or b"").decode("latin-1"))
    try:
        return max(-1, int(query.get("after_seq", ["-1"])[-1]))
    except ValueError:
        return -1


@database_sync_to_async
def _read(rollout_id: int, after_seq: int) -> tuple[dict | None, list[dict], bool]:
    """(state, events after after_seq, complete). The state is read first: if it says finished,
    every event (the summary included) was stored before it, so the events read next are all."""
    state = selectors.rollout_state(rollout_id=rollout_id)
    if state is None:
        return None, [], True
    events: list[dict] = []
    while len(events) < MAX_PER_CATCH_UP:
        rows = selectors.rollout_events_after(rollout_id=rollout_id, after_seq=after_seq, limit=BATCH)
        events.extend(selectors.rollout_event_payload(r) for r in rows)
        if len(rows) < BATCH:
            return state, events, True
        after_seq = rows[-1].seq
    return state, events, False


class RolloutConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.rollout_id = int(self.scope["url_route"]["kwargs"]["rollout_id"])
        self.last_seq = _after_seq(self.scope)
        self.ended = False
        self.last_state: dict | None = None
        self.poller: asyncio.Task | None = None
        self.lock = asyncio.Lock()
        if await database_sync_to_async(selectors.rollout_state)(rollout_id=self.rollout_id) is None:
            await self.close(code=4404)
            return
        await self.channel_layer.group_add(rollout_group(self.rollout_id), self.channel_name)
        await self.accept()
        await self.catch_up()
        if not self.ended:
            self.poller = asyncio.ensure_future(self.poll())

    async def disconnect(self, code: int) -> None:
        if self.poller is not None:
            self.poller.cancel()
        if hasattr(self, "lock"):
            await self.channel_layer.group_discard(rollout_group(self.rollout_id), self.channel_name)

    async def rollout_ring(self, message: dict) -> None:
        seq = message.get("seq")
        if seq is not None and seq <= self.last_seq:
            return  # already sent
        await self.catch_up()

    async def poll(self) -> None:
        while not self.ended:
            await asyncio.sleep(POLL_S)
            await self.catch_up()

    async def catch_up(self) -> None:
        async with self.lock:
            if self.ended:
                return
            state, events, complete = await _read(self.rollout_id, self.last_seq)
            for event in events:
                await self.send_json({"type": "event", "event": event})
                self.last_seq = event["seq"]
            if state is None or (complete and state["finished"]):
                self.ended = True
                await self.send_json({"type": "end", "state": state, "last_seq": self.last_seq})
                await self.close()
            elif state != self.last_state:
                await self.send_json({"type": "state", "state": state})
            self.last_state = state
