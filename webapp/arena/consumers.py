"""``/ws/evaluations/<id>/``: the current state on connect, then again after every ring."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from . import selectors
from .doorbell import evaluation_group
from .models import Evaluation


@database_sync_to_async
def _state(evaluation_id: int) -> dict | None:
    try:
        evaluation = selectors.evaluation_get(evaluation_id=evaluation_id)
    except Evaluation.DoesNotExist:
        return None
    return {
        "id": evaluation.pk,
        "status": evaluation.status,
        "finished": evaluation.is_finished,
        "speedup_eager": evaluation.speedup_eager,
        "speedup_compile": evaluation.speedup_compile,
    }


class EvaluationConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        self.evaluation_id = int(self.scope["url_route"]["kwargs"]["evaluation_id"])
        state = await _state(self.evaluation_id)
        if state is None:
            await self.close(code=4404)
            return
        await self.channel_layer.group_add(evaluation_group(self.evaluation_id), self.channel_name)
        await self.accept()
        await self.send_json(state)

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "evaluation_id"):
            await self.channel_layer.group_discard(evaluation_group(self.evaluation_id), self.channel_name)

    async def evaluation_changed(self, event: dict) -> None:
        state = await _state(self.evaluation_id)
        if state is not None:
            await self.send_json(state)
