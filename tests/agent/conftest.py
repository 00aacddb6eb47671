"""Fixtures of the agent tests: the scripted OpenAI-compatible server and the tasks."""

from __future__ import annotations

from typing import Any

import pytest
from scripted_llm import TASKS, ScriptedServer


@pytest.fixture
def openai_server():
    servers: list[ScriptedServer] = []

    def start(script: list[dict[str, Any]]) -> ScriptedServer:
        server = ScriptedServer(script)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def relu_task() -> str:
    return (TASKS / "relu_add.py").read_text()
