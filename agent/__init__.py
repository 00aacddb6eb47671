"""The multi-turn agent: LLM clients, tools, prompts, context policy and trajectory events. No Django."""

from agent.events import EventRecorder, EventSink, JsonlSink, ListSink, TrajectoryEvent
from agent.llm import ChatClient, Completion, OpenAIChatClient, TransformersChatClient
from agent.loop import STOP_REASONS, RolloutConfig, RolloutSummary, run_rollout
from agent.prompts import Variant, load_variants

__all__ = [
    "ChatClient",
    "Completion",
    "EventRecorder",
    "EventSink",
    "JsonlSink",
    "ListSink",
    "OpenAIChatClient",
    "RolloutConfig",
    "RolloutSummary",
    "STOP_REASONS",
    "TrajectoryEvent",
    "TransformersChatClient",
    "Variant",
    "load_variants",
    "run_rollout",
]
