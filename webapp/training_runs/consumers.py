"""``/ws/training/<id>/?after_step=N``: the stored metrics of every step after N, then new steps as
they are stored, ``state`` messages (status, step, checkpoints, newest sampled step), then
``{"type": "end"}`` once the run has finished. The resume machinery is webapp.core.events."""

from __future__ import annotations

from typing import Any

from webapp.core.events import ResumeConsumer

from . import selectors
from .services import training_group


class TrainingRunConsumer(ResumeConsumer):
    url_kwarg = "run_id"
    cursor_param = "after_step"
    event_type = "metrics"

    def group_for(self, object_id: int) -> str:
        return training_group(object_id)

    def read_state(self, object_id: int) -> dict[str, Any] | None:
        return selectors.training_run_state(run_id=object_id, viewer=self.scope.get("user"))

    def read_after(self, object_id: int, after: int, limit: int) -> list[dict[str, Any]]:
        rows = selectors.training_metrics_after(run_id=object_id, after_step=after, limit=limit)
        return [selectors.training_metric_payload(r) for r in rows]
