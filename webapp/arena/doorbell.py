"""Rings the channel layer when an evaluation row changes (after commit). The row is the truth; the
message only says "look again", so a lost ring costs a refresh, never data."""

from __future__ import annotations

from webapp.core.events import ring


def evaluation_group(evaluation_id: int) -> str:
    return f"evaluation-{evaluation_id}"


def evaluation_ring(*, evaluation_id: int) -> None:
    ring(group=evaluation_group(evaluation_id), message={"type": "evaluation.changed", "id": evaluation_id})
