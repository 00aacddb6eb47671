"""Fixtures of the rollout tests: the agent tests' scripted OpenAI-compatible server, a CPU task,
rollout and event factories. The web app's factories (make_task, make_submitter, …) come from
tests/webapp/conftest.py."""

from __future__ import annotations

from typing import Any

import pytest
from rollout_helpers import RELU_ADD_TASK, ScriptedServer, trajectory_event


@pytest.fixture
def llm_server():
    """Start a scripted chat-completions server on loopback: ``llm_server([reply(...), ...])``."""
    servers: list[ScriptedServer] = []

    def start(script: list[dict[str, Any]]) -> ScriptedServer:
        server = ScriptedServer(script)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def make_endpoint():
    """Register an LLM endpoint as staff would: ``make_endpoint(name=..., base_url=...)``."""
    from webapp.rollouts.services import llm_endpoint_register

    def make(
        *,
        name: str = "qwen",
        base_url: str = "http://127.0.0.1:8000/v1",
        model: str = "Qwen/Qwen3-8B",
        api_key_env: str = "",
    ):
        return llm_endpoint_register(name=name, base_url=base_url, model=model, api_key_env=api_key_env)

    return make


@pytest.fixture
def relu_add_task(make_task):
    return make_task(name="relu_add", suite="agent-tests", source=RELU_ADD_TASK, ops=["relu", "add"])


@pytest.fixture
def make_rollout(make_task, make_submitter):
    from agent import RolloutConfig
    from webapp.rollouts.models import Rollout

    def make(
        *,
        task=None,
        submitter=None,
        status: str = "queued",
        max_turns: int = 3,
        base_url="http://127.0.0.1:9/v1",
        endpoint=None,
        **fields,
    ) -> Rollout:
        task = task or make_task()
        config = RolloutConfig.for_evaluation(
            max_turns=max_turns,
            track="open",
            device="cpu",
            task_name=task.name,
            baselines=("eager",),
            target_speedup=None,
            trials=2,
        )
        return Rollout.objects.create(
            task=task,
            submitter=submitter or make_submitter(kind="agent"),
            endpoint=endpoint,
            base_url=endpoint.base_url if endpoint else base_url,
            model=endpoint.model if endpoint else "scripted",
            settings={"config": config.to_dict(), "contrastive": False},
            status=status,
            **fields,
        )

    return make


@pytest.fixture
def store_events():
    """Store events seq a..b-1 of a rollout through the service (row first, then the ring)."""
    from webapp.rollouts.services import rollout_event_store

    def store(rollout_id: int, seqs, **kw) -> None:
        for seq in seqs:
            rollout_event_store(rollout_id=rollout_id, event=trajectory_event(rollout_id, seq, **kw))

    return store
