"""Trajectory events: every turn of a rollout, as plain JSON-safe data.

The agent emits events through an :class:`EventSink`; the web app's sink stores the row first and then
wakes its listeners, so ``emit`` is called synchronously, in ``seq`` order, from the rollout's thread.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TextIO, runtime_checkable

EVENT_KINDS = (
    "system",
    "user",
    "assistant",
    "tool_call",
    "observation",
    "evaluation",
    "summary",
    "error",
)


def _now_iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class TrajectoryEvent:
    """One step of a rollout.

    ``tool_call`` is ``{"id", "name", "args"}`` (args a dict; the text protocol uses the same shape);
    ``evaluation`` is an ``EvalResult.to_dict()``; ``data`` carries kind-specific extras (the kernel
    source of an evaluation, the summary of a finished rollout).
    """

    rollout_id: str
    seq: int
    kind: str
    role: str = ""
    content: str = ""
    turn: int = 0
    tool_call: dict[str, Any] | None = None
    observation: str = ""
    evaluation: dict[str, Any] | None = None
    reward: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    elapsed_s: float = 0.0
    created_at: str = field(default_factory=_now_iso)
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise ValueError(f"kind must be one of {EVENT_KINDS}, got {self.kind!r}")
        if self.seq < 0:
            raise ValueError("seq must be non-negative")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrajectoryEvent:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        return cls(**kwargs)


@runtime_checkable
class EventSink(Protocol):
    """Where events go. ``emit`` is called in ``seq`` order and must return once the event is stored."""

    def emit(self, event: TrajectoryEvent) -> None: ...


class ListSink:
    """Keeps events in memory (tests, training's rollout collection)."""

    def __init__(self) -> None:
        self.events: list[TrajectoryEvent] = []
        self._lock = threading.Lock()

    def emit(self, event: TrajectoryEvent) -> None:
        with self._lock:
            self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of_kind(self, kind: str) -> list[TrajectoryEvent]:
        return [e for e in self.events if e.kind == kind]


class JsonlSink:
    """Writes one JSON object per line to a text stream and flushes, so a reader sees it at once."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._lock = threading.Lock()

    def emit(self, event: TrajectoryEvent) -> None:
        line = event.to_json()
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()


class FanoutSink:
    """Emits to several sinks in order (e.g. the web app's store and a JSONL log)."""

    def __init__(self, *sinks: EventSink) -> None:
        self.sinks = list(sinks)

    def emit(self, event: TrajectoryEvent) -> None:
        for sink in self.sinks:
            sink.emit(event)


class EventRecorder:
    """Builds the events of one rollout: assigns increasing ``seq`` and ``elapsed_s``, then emits.

    ``start_seq`` lets a resumed rollout continue after the last stored event.
    """

    def __init__(self, rollout_id: str, sink: EventSink, *, start_seq: int = 0) -> None:
        self.rollout_id = rollout_id
        self.sink = sink
        self._next_seq = start_seq
        self._started = time.monotonic()
        self._lock = threading.Lock()

    @property
    def next_seq(self) -> int:
        return self._next_seq

    def elapsed_s(self) -> float:
        return time.monotonic() - self._started

    def emit(self, kind: str, **fields: Any) -> TrajectoryEvent:
        with self._lock:
            event = TrajectoryEvent(
                rollout_id=self.rollout_id,
                seq=self._next_seq,
                kind=kind,
                elapsed_s=round(self.elapsed_s(), 6),
                **fields,
            )
            self.sink.emit(event)
            self._next_seq += 1
        return event
