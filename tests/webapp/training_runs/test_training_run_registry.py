"""Training configs from users who are not staff name only registered task sets and base models (or
ones that read no server file); they are validated before any row is written. Staff may still give
paths. Over HTTP with an ordinary user (alice) and a staff user (root)."""

from __future__ import annotations

import pytest
from training_run_helpers import tiny_overrides

from webapp.training_runs.models import RegisteredModel, RegisteredTaskSet, TrainingRun

pytestmark = pytest.mark.django_db


def _launch(client, token, **body):
    return client.post(
        "/api/training/", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


@pytest.fixture
def registry(tmp_path):
    ops = RegisteredTaskSet.objects.create(
        name="ops6k", spec="jsonl:data/ops6k.jsonl", description="Ops-6K style tasks"
    )
    RegisteredTaskSet.objects.create(name="retired", spec="jsonl:/data/old.jsonl", enabled=False)
    qwen = RegisteredModel.objects.create(
        name="qwen-coder-7b", location="Qwen/Qwen2.5-Coder-7B-Instruct", description="the 7B coder"
    )
    return ops, qwen


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (
            {"task_set": "jsonl:/etc/passwd"},
            "task set 'jsonl:/etc/passwd' is not registered; choose one of: ops6k",
        ),
        ({"task_set": "retired"}, "task set 'retired' is not registered; choose one of: ops6k"),
        ({"base_model": "/etc"}, "base model '/etc' is not registered; choose one of: qwen-coder-7b"),
        (
            {"overrides": {"data": {"sources": [{"kind": "jsonl", "path": "/etc/passwd"}]}}},
            "a task set that reads server files must be a registered one; choose one of: ops6k",
        ),
        (
            {"overrides": {"data": {"eval_sources": [{"kind": "jsonl", "path": "/etc/shadow"}]}}},
            "a task set that reads server files must be a registered one; choose one of: ops6k",
        ),
        (
            {"overrides": {"model": {"kind": "pretrained", "name_or_path": "/root/.ssh"}}},
            "a pretrained base model must be a registered one; choose one of: qwen-coder-7b",
        ),
        (
            {"overrides": {"evaluator": {"request": {"task_source": "import os"}}}},
            "evaluator.request may set only ['baselines', 'trials'], not ['task_source']",
        ),
    ],
)
def test_a_user_cannot_make_the_server_read_a_path(client, api_token, registry, body, detail):
    response = _launch(client, api_token, recipe="tiny_cpu_grpo", **body)

    assert (response.status_code, response.json()["detail"]) == (422, detail)
    assert TrainingRun.objects.count() == 0


def test_a_recipe_that_reads_an_unregistered_file_is_refused_to_a_user(client, api_token):
    response = _launch(client, api_token, recipe="cuda_agent")

    assert response.status_code == 422
    assert response.json()["detail"].startswith("a task set that reads server files must be a registered one")
    assert TrainingRun.objects.count() == 0


def test_registered_names_resolve_to_their_server_locations(client, api_token, registry):
    listed = client.get("/api/training/registry").json()

    response = _launch(
        client,
        api_token,
        recipe="tiny_cpu_grpo",
        task_set="ops6k",
        base_model="qwen-coder-7b",
        overrides=tiny_overrides(steps=1),
    )

    run = TrainingRun.objects.get()
    assert response.status_code == 202, response.content
    assert run.config["data"]["sources"] == [{"kind": "jsonl", "path": "data/ops6k.jsonl"}]
    assert (run.config["model"]["kind"], run.config["model"]["name_or_path"]) == (
        "pretrained",
        "Qwen/Qwen2.5-Coder-7B-Instruct",
    )
    assert listed == {
        "task_sets": [{"name": "ops6k", "description": "Ops-6K style tasks"}],
        "models": [{"name": "qwen-coder-7b", "description": "the 7B coder"}],
    }


def test_a_registered_task_set_allows_a_recipe_that_reads_it(client, api_token, registry):
    response = _launch(client, api_token, recipe="cuda_agent", base_model="qwen-coder-7b")

    assert response.status_code == 202, response.content
    assert TrainingRun.objects.get().config["data"]["sources"] == [
        {"kind": "jsonl", "path": "data/ops6k.jsonl"}
    ]


def test_labels_that_read_no_server_file_need_no_registry(client, api_token):
    response = _launch(
        client,
        api_token,
        recipe="tiny_cpu_grpo",
        task_set="suite:gelu,silu",
        base_model="tiny:tiny_gpt2,hidden_size=32",
        overrides=tiny_overrides(steps=1),
    )

    run = TrainingRun.objects.get()
    assert response.status_code == 202, response.content
    assert run.config["data"]["sources"] == [{"kind": "suite", "names": ["gelu", "silu"]}]
    assert run.config["model"]["kind"] == "tiny_gpt2"


def test_staff_may_still_give_paths(client, staff_token, tmp_path):
    response = _launch(
        client,
        staff_token,
        recipe="tiny_cpu_grpo",
        task_set=f"jsonl:{tmp_path}/tasks.jsonl",
        base_model=str(tmp_path / "model"),
        overrides=tiny_overrides(steps=1),
    )

    run = TrainingRun.objects.get()
    assert response.status_code == 202, response.content
    assert run.config["data"]["sources"] == [{"kind": "jsonl", "path": f"{tmp_path}/tasks.jsonl"}]
    assert run.config["model"]["name_or_path"] == str(tmp_path / "model")
