"""The channel layer is a doorbell: a ring says "rollout N has rows after seq S"; readers go to the
database for the rows. A lost or coalesced ring costs a little latency, never an event."""

from __future__ import annotations

from webapp.core.events import ring


def rollout_group(rollout_id: int) -> str:
    return f"rollout_{rollout_id}"


def rollout_ring(*, rollout_id: int, seq: int | None = None) -> None:
    """Ring once the current transaction commits (at once outside a transaction)."""
    ring(group=rollout_group(rollout_id), seq=seq)
