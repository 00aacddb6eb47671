import io
import json

import pytest

from agent.events import EventRecorder, JsonlSink, ListSink, TrajectoryEvent


def test_event_round_trips_through_dict_and_json():
    event = TrajectoryEvent(
        rollout_id="r1",
        seq=3,
        kind="evaluation",
        role="tool",
        content="",
        turn=2,
        tool_call={"id": "c1", "name": "verify"},
        evaluation={"status": "passed"},
        reward=0.5,
        prompt_tokens=10,
        completion_tokens=5,
        elapsed_s=1.25,
        data={"kernel_hash": "abc"},
    )

    again = TrajectoryEvent.from_dict(json.loads(event.to_json()))

    assert again == event


def test_event_rejects_unknown_kind():
    with pytest.raises(ValueError, match="kind must be one of"):
        TrajectoryEvent(rollout_id="r", seq=0, kind="chatter")


def test_recorder_assigns_increasing_seq_from_start_and_emits_in_order():
    sink = ListSink()
    recorder = EventRecorder("r9", sink, start_seq=5)

    recorder.emit("system", content="s")
    recorder.emit("user", content="u")
    recorder.emit("assistant", content="a", turn=1)

    assert [(e.seq, e.kind, e.rollout_id) for e in sink.events] == [
        (5, "system", "r9"),
        (6, "user", "r9"),
        (7, "assistant", "r9"),
    ]
    assert recorder.next_seq == 8


def test_recorder_does_not_consume_a_seq_when_the_sink_fails():
    class FailingOnce:
        def __init__(self):
            self.calls = 0
            self.events = []

        def emit(self, event):
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("database down")
            self.events.append(event)

    sink = FailingOnce()
    recorder = EventRecorder("r", sink)

    with pytest.raises(RuntimeError):
        recorder.emit("system", content="s")
    recorder.emit("system", content="s")

    assert [e.seq for e in sink.events] == [0]


def test_jsonl_sink_writes_one_parseable_line_per_event():
    stream = io.StringIO()
    recorder = EventRecorder("r", JsonlSink(stream))

    recorder.emit("user", content="line one\nline two")
    recorder.emit("summary", content="done", data={"turns": 1})

    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    assert json.loads(lines[0])["content"] == "line one\nline two"
    assert json.loads(lines[1])["data"] == {"turns": 1}
    assert json.loads(lines[1])["seq"] == 1
