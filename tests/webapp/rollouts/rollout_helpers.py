"""Constants and helpers of the rollout tests (the scripted server is the agent tests' own)."""

from __future__ import annotations

import sys
from pathlib import Path

AGENT_TESTS = Path(__file__).resolve().parents[2] / "agent"
if str(AGENT_TESTS) not in sys.path:
    sys.path.insert(0, str(AGENT_TESTS))

from scripted_llm import ScriptedServer, error, kernel_reply, reply  # noqa: E402

RELU_ADD_TASK = (AGENT_TESTS / "tasks" / "relu_add.py").read_text()
GOOD_KERNEL = (AGENT_TESTS / "kernels" / "torch_relu_add.py").read_text()
WRONG_KERNEL = (AGENT_TESTS / "kernels" / "wrong_relu_add.py").read_text()

__all__ = [
    "GOOD_KERNEL",
    "RELU_ADD_TASK",
    "WRONG_KERNEL",
    "ScriptedServer",
    "error",
    "kernel_reply",
    "reply",
    "trajectory_event",
]


def trajectory_event(
    rollout_id: int, seq: int, *, kind: str = "assistant", content: str | None = None, turn: int = 1
):
    from agent import TrajectoryEvent

    return TrajectoryEvent(
        rollout_id=str(rollout_id),
        seq=seq,
        kind=kind,
        role="assistant" if kind == "assistant" else "system",
        content=content if content is not None else f"event {seq}",
        turn=turn,
        prompt_tokens=10 if kind == "assistant" else 0,
        completion_tokens=5 if kind == "assistant" else 0,
    )
