"""``/ws/rollouts/<id>/?after_seq=N``: the stored events after N, then new ones as they are stored,
then ``{"type": "end"}`` once the rollout has finished. The resume machinery (database reads after the
last seq sent, doorbell, slow poll) is webapp.core.events.ResumeConsumer."""

from __future__ import annotations

from typing import Any

from webapp.core.events import ResumeConsumer

from . import selectors
from .doorbell import rollout_group


class RolloutConsumer(ResumeConsumer):
    url_kwarg = "rollout_id"
    cursor_param = "after_seq"
    event_type = "event"

    def group_for(self, object_id: int) -> str:
        return rollout_group(object_id)

    def read_state(self, object_id: int) -> dict[str, Any] | None:
        return selectors.rollout_state(rollout_id=object_id, viewer=self.scope.get("user"))

    def read_after(self, object_id: int, after: int, limit: int) -> list[dict[str, Any]]:
        rows = selectors.rollout_events_after(rollout_id=object_id, after_seq=after, limit=limit)
        visible = any(r.kind == "error" for r in rows) and selectors.rollout_errors_visible(
            rollout_id=object_id, viewer=self.scope.get("user")
        )
        return [selectors.rollout_event_payload(r, errors_visible=visible) for r in rows]
