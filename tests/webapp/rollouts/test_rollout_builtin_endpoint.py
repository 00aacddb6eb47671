"""The built-in LLM endpoint: the app's scripted policy served on loopback (a real HTTP server in a
thread), registered by one service call; a first rollout against it, launched over HTTP and run by
the inline job backend, shows a whole trajectory with a real kernel and the real evaluator."""

from __future__ import annotations

import json

import httpx
import pytest
from rollout_helpers import RELU_ADD_TASK

from agent.prompts import task_prompt
from agent.protocol import parse_text_reply
from gpu_workers.suite import get_task
from webapp.arena.models import Kernel
from webapp.rollouts.builtin_policy import MODEL_NAME
from webapp.rollouts.models import LlmEndpoint, Rollout, RolloutEvent
from webapp.rollouts.services import BUILTIN_ENDPOINT, llm_endpoint_builtin_start


def _ask(url: str, messages: list[dict]) -> str:
    response = httpx.post(f"{url}/chat/completions", json={"model": MODEL_NAME, "messages": messages})
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def _launch(client, token, task, **settings):
    body = {
        "task_id": task.pk,
        "submitter": "first-agent",
        "endpoint": BUILTIN_ENDPOINT,
        "settings": {"max_turns": 5, "device": "cpu", **settings},
    }
    return client.post(
        "/api/rollouts/",
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


@pytest.mark.django_db
def test_registering_the_builtin_endpoint_needs_no_key_and_is_idempotent():
    first = llm_endpoint_builtin_start()
    again = llm_endpoint_builtin_start()

    assert first.pk == again.pk and LlmEndpoint.objects.count() == 1
    assert (again.name, again.model, again.api_key_env, again.builtin) == (
        BUILTIN_ENDPOINT,
        MODEL_NAME,
        "",
        True,
    )
    assert again.base_url.startswith("http://127.0.0.1:") and again.base_url.endswith("/v1")
    assert httpx.get(f"{again.base_url}/models").json()["data"][0]["id"] == MODEL_NAME


@pytest.mark.django_db
def test_the_policy_verifies_then_submits_then_stops():
    url = llm_endpoint_builtin_start().base_url
    messages = [
        {"role": "system", "content": "you write kernels"},
        {
            "role": "user",
            "content": task_prompt(RELU_ADD_TASK, task_name="relu_add", device="cpu", track="open"),
        },
    ]

    first = parse_text_reply(_ask(url, messages))
    messages += [{"role": "assistant", "content": "…"}, {"role": "user", "content": "verified: passed"}]
    second = parse_text_reply(_ask(url, messages))
    messages += [{"role": "assistant", "content": "…"}, {"role": "user", "content": "submitted"}]
    third = parse_text_reply(_ask(url, messages))

    assert [a.tool for a in first.actions] == ["verify"]
    assert "class ModelNew(Model):" in first.actions[0].source
    assert RELU_ADD_TASK.strip() in first.actions[0].source  # the reference's own Model, then ModelNew
    assert [(a.tool, a.source) for a in second.actions] == [("submit", first.actions[0].source)]
    assert third.actions == []


@pytest.mark.django_db
def test_for_a_suite_task_the_policy_writes_the_suites_kernel_for_the_device():
    url = llm_endpoint_builtin_start().base_url
    silu = get_task("silu")

    cpu = parse_text_reply(
        _ask(url, [{"role": "user", "content": task_prompt(silu.task_source, device="cpu")}])
    )
    cuda = parse_text_reply(
        _ask(url, [{"role": "user", "content": task_prompt(silu.task_source, device="cuda")}])
    )

    assert cpu.actions[0].source.strip() == silu.cpu_kernel_source.strip()
    assert cuda.actions[0].source.strip() == silu.cuda_kernel_source.strip()


@pytest.mark.django_db(transaction=True)
def test_a_first_rollout_on_the_builtin_endpoint_shows_a_whole_trajectory(client, api_token, make_task):
    llm_endpoint_builtin_start()
    task = make_task(name="relu_add", suite="agent-tests", source=RELU_ADD_TASK)

    response = _launch(client, api_token, task, track="open")  # inline backend: runs before it returns

    rollout = Rollout.objects.get(pk=response.json()["rollout_ids"][0])
    events = list(RolloutEvent.objects.filter(rollout=rollout).order_by("seq"))
    evaluations = [e for e in events if e.kind == "evaluation"]
    assert response.status_code == 202
    assert (rollout.status, rollout.stop_reason, rollout.passed, rollout.turns) == (
        "succeeded",
        "success",
        True,
        2,
    )
    assert [(e.data["tool"], e.evaluation["status"]) for e in evaluations] == [
        ("verify", "passed"),
        ("submit", "passed"),
    ]
    assert "ACTION: verify" in next(e.content for e in events if e.kind == "assistant")
    kernel = Kernel.objects.get(pk=rollout.best_kernel_id)
    assert (kernel.submitter.name, kernel.submitter.created_by.username) == ("first-agent", "alice")
    assert "class ModelNew(Model):" in kernel.source
    assert rollout.best_evaluation.status == "passed"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_first_rollout_on_a_suite_task_compiles_and_passes_the_suites_cpp_kernel(
    client, api_token, make_task
):
    llm_endpoint_builtin_start()
    silu = get_task("silu")
    task = make_task(name="silu", suite="arena", source=silu.task_source)

    response = _launch(client, api_token, task, track="strict")

    rollout = Rollout.objects.get(pk=response.json()["rollout_ids"][0])
    assert (rollout.status, rollout.stop_reason, rollout.passed) == ("succeeded", "success", True)
    assert Kernel.objects.get(pk=rollout.best_kernel_id).source.strip() == silu.cpu_kernel_source.strip()
    assert (rollout.best_evaluation.track, rollout.best_evaluation.status) == ("strict", "passed")
