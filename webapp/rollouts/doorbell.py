"""The channel layer is a doorbell: a ring says "rollout N has rows after seq S"; readers go to the
database for the rows. A lost or coalesced ring costs a little latency, never an event."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from django.db import transaction

logger = logging.getLogger(__name__)

RING_TYPE = "rollout.ring"  # handled by RolloutConsumer.rollout_ring


def rollout_group(rollout_id: int) -> str:
    return f"rollout_{rollout_id}"


def _ring_now(rollout_id: int, seq: int | None) -> None:
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(rollout_group(rollout_id), {"type": RING_TYPE, "seq": seq})
    except Exception:  # a doorbell that fails must never fail the rollout
        logger.warning("could not ring rollout %s", rollout_id, exc_info=True)


def rollout_ring(*, rollout_id: int, seq: int | None = None) -> None:
    """Ring once the current transaction commits (at once outside a transaction)."""
    transaction.on_commit(lambda: _ring_now(rollout_id, seq))
