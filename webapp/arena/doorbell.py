"""Rings the channel layer when an evaluation row changes (after commit). The row is the truth; the
message only says "look again", so a lost ring costs a refresh, never data."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from django.db import transaction

logger = logging.getLogger(__name__)


def evaluation_group(evaluation_id: int) -> str:
    return f"evaluation-{evaluation_id}"


def evaluation_ring(*, evaluation_id: int) -> None:
    def ring() -> None:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        if layer is None:
            return
        try:
            async_to_sync(layer.group_send)(
                evaluation_group(evaluation_id), {"type": "evaluation.changed", "id": evaluation_id}
            )
        except Exception:  # a doorbell that fails must never fail the job
            logger.warning("could not ring evaluation %s", evaluation_id, exc_info=True)

    transaction.on_commit(ring)
