"""/api/rollouts/: launch (token auth, registered endpoints only), list, detail, paginated events,
cancel; clear errors."""

from __future__ import annotations

import json

import pytest
from rollout_helpers import reply

from webapp.rollouts.models import Rollout, RolloutBatch, RolloutEvent

pytestmark = pytest.mark.django_db


def _post(client, path, body, token=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(path, data=json.dumps(body), content_type="application/json", **headers)


def _launch_body(task_id_, **overrides):
    body = {
        "task_id": task_id_,
        "submitter": "qwen-agent",
        "endpoint": "qwen",
        "settings": {"max_turns": 7, "track": "open", "device": "cpu", "contrastive": True},
    }
    body.update(overrides)
    return body


@pytest.fixture(autouse=True)
def qwen_endpoint(make_endpoint):
    return make_endpoint()


def _detail(response) -> str:
    """The error message(s): a string from the endpoint, a list from schema validation."""
    return json.dumps(response.json()["detail"])


def test_launch_queues_a_rollout_with_its_settings(client, api_token, make_task):
    task = make_task()

    response = _post(client, "/api/rollouts/", _launch_body(task.pk), api_token)

    assert response.status_code == 202, response.content
    data = response.json()
    rollout = Rollout.objects.get(pk=data["rollout_ids"][0])
    assert data["batch_id"] is None
    assert data["stream"] == [f"/ws/rollouts/{rollout.pk}/?after_seq=-1"]
    assert (rollout.status, rollout.task_id, rollout.submitter.name) == ("queued", task.pk, "qwen-agent")
    assert rollout.submitter.kind == "agent"
    assert rollout.endpoint.name == "qwen"
    assert (rollout.base_url, rollout.model) == ("http://127.0.0.1:8000/v1", "Qwen/Qwen3-8B")
    config = rollout.settings["config"]
    assert (config["max_turns"], config["track"], config["device"], config["task_name"]) == (
        7,
        "open",
        "cpu",
        task.name,
    )
    assert rollout.settings["contrastive"] is True
    assert rollout.created_by.username == "alice"


def test_contrastive_launch_carries_earlier_kernels_of_the_task(
    client, api_token, make_task, make_kernel, make_evaluation
):
    task = make_task()
    make_evaluation(kernel=make_kernel(task=task), status="passed", track="open", eager=1.7)
    make_evaluation(kernel=make_kernel(task=task), status="incorrect", track="open")
    make_evaluation(kernel=make_kernel(task=task), status="passed", track="strict", eager=9.0)  # other track

    response = _post(client, "/api/rollouts/", _launch_body(task.pk), api_token)

    rollout = Rollout.objects.get(pk=response.json()["rollout_ids"][0])
    variants = rollout.settings["config"]["contrastive_variants"]
    assert rollout.settings["contrastive_variants"] == 2
    assert sorted((v["status"], v["speedup"]) for v in variants) == [("incorrect", None), ("passed", 1.7)]


def test_launch_a_whole_suite(client, api_token, make_task):
    tasks = [make_task(suite="mini"), make_task(suite="mini"), make_task(suite="other")]

    body = _launch_body(None, suite="mini")
    body.pop("task_id")
    response = _post(client, "/api/rollouts/", body, api_token)

    assert response.status_code == 202, response.content
    data = response.json()
    batch = RolloutBatch.objects.get(pk=data["batch_id"])
    assert sorted(Rollout.objects.filter(batch=batch).values_list("task_id", flat=True)) == sorted(
        t.pk for t in tasks[:2]
    )
    assert len(data["rollout_ids"]) == 2


@pytest.mark.parametrize(
    ("change", "status", "detail"),
    [
        ({"task_id": 987654}, 404, "no task 987654"),
        ({"endpoint": "nope"}, 422, "no LLM endpoint 'nope'; choose one of: qwen"),
        ({"endpoint": "http://169.254.169.254/v1"}, 422, "the name must start with a letter or digit"),
        ({"base_url": "http://127.0.0.1:9/v1"}, 422, "Extra inputs are not permitted"),
        ({"submitter": ""}, 422, "the name is empty"),
        ({"submitter": "../../admin"}, 422, "the name must start with a letter or digit"),
        ({"settings": {"max_turns": 0}}, 422, "max_turns must be an integer from 1 to 1000"),
        ({"settings": {"track": "fast"}}, 422, "track must be one of strict, open"),
        ({"settings": {"api_key": "x"}}, 422, "unknown settings ['api_key']"),
        ({"settings": {"trials": 10_000}}, 422, "trials must be an integer from 1 to 50"),
        ({"settings": {"max_completion_tokens": 99_999}}, 422, "invalid settings: max_completion_tokens"),
        ({"suite": "mini"}, 422, "give exactly one of task_id or suite"),
    ],
)
def test_bad_launch_input_gives_a_clear_error(client, api_token, make_task, change, status, detail):
    task = make_task()

    response = _post(client, "/api/rollouts/", _launch_body(task.pk, **change), api_token)

    assert response.status_code == status, response.content
    assert detail in _detail(response)
    assert Rollout.objects.count() == 0


def test_unknown_suite_is_a_clear_error(client, api_token):
    body = _launch_body(None, suite="nope")
    body.pop("task_id")

    response = _post(client, "/api/rollouts/", body, api_token)

    assert (response.status_code, response.json()["detail"]) == (422, "no tasks in suite 'nope'")


def test_launch_and_cancel_need_a_token(client, make_task, make_rollout):
    task = make_task()
    rollout = make_rollout()

    no_token = _post(client, "/api/rollouts/", _launch_body(task.pk))
    bad_token = _post(client, "/api/rollouts/", _launch_body(task.pk), "not-a-token")
    cancel = _post(client, f"/api/rollouts/{rollout.pk}/cancel", {})

    assert (no_token.status_code, bad_token.status_code, cancel.status_code) == (401, 401, 401)
    assert Rollout.objects.count() == 1


def test_the_api_key_comes_from_the_workers_environment_and_never_reaches_the_database(
    client,
    api_token,
    relu_add_task,
    llm_server,
    make_endpoint,
    monkeypatch,
    django_capture_on_commit_callbacks,
):
    server = llm_server([reply("Let me think about it first.")])
    make_endpoint(name="scripted", base_url=server.url, model="scripted", api_key_env="KC_TEST_LLM_KEY")
    monkeypatch.setenv("KC_TEST_LLM_KEY", "sk-very-secret-123")
    body = _launch_body(relu_add_task.pk, endpoint="scripted")
    body["settings"] = {"max_turns": 1, "track": "open", "device": "cpu"}

    with django_capture_on_commit_callbacks(execute=True):  # the inline job runs the rollout
        response = _post(client, "/api/rollouts/", body, api_token)

    rollout = Rollout.objects.get(pk=response.json()["rollout_ids"][0])
    stored = json.dumps(
        [
            list(Rollout.objects.values()),
            list(RolloutEvent.objects.values("content", "data", "tool_call")),
        ],
        default=str,
    )
    assert (rollout.status, rollout.stop_reason) == ("succeeded", "max_turns")
    assert server.headers[0]["authorization"] == "Bearer sk-very-secret-123"
    assert "sk-very-secret-123" not in stored


def test_list_detail_and_paginated_events(client, make_rollout, store_events):
    rollout = make_rollout(status="running")
    make_rollout(status="succeeded")
    store_events(rollout.pk, range(5))

    listed = client.get("/api/rollouts/?status=running").json()
    detail = client.get(f"/api/rollouts/{rollout.pk}").json()
    pages, after = [], -1
    while True:
        page = client.get(f"/api/rollouts/{rollout.pk}/events?after_seq={after}&limit=2").json()
        pages.append([e["seq"] for e in page["items"]])
        after = page["next_after_seq"]
        if not page["has_more"]:
            break
    missing = client.get("/api/rollouts/987654")
    missing_events = client.get("/api/rollouts/987654/events")

    assert [r["id"] for r in listed["items"]] == [rollout.pk]
    assert listed["count"] == 1
    assert (detail["status"], detail["turns"], detail["prompt_tokens"]) == ("running", 1, 50)
    assert detail["settings"]["config"]["max_turns"] == 3
    assert pages == [[0, 1], [2, 3], [4]]
    assert after == 4
    assert (missing.status_code, missing.json()["detail"]) == (404, "no rollout 987654")
    assert missing_events.status_code == 404


def test_cancel_through_the_api(client, api_token, make_rollout, django_user_model):
    alice = django_user_model.objects.get(username="alice")
    queued = make_rollout(created_by=alice)
    done = make_rollout(status="succeeded", created_by=alice)

    response = _post(client, f"/api/rollouts/{queued.pk}/cancel", {}, api_token)
    again = _post(client, f"/api/rollouts/{done.pk}/cancel", {}, api_token)
    missing = _post(client, "/api/rollouts/987654/cancel", {}, api_token)

    assert (response.status_code, response.json()["status"], response.json()["cancel_requested"]) == (
        200,
        "cancelled",
        True,
    )
    assert (again.json()["status"], again.json()["cancel_requested"]) == ("succeeded", False)
    assert missing.status_code == 404


def test_rollout_list_query_count_does_not_grow(client, make_rollout, django_assert_max_num_queries):
    for _ in range(6):
        make_rollout()

    with django_assert_max_num_queries(3):
        response = client.get("/api/rollouts/?page_size=50")

    assert len(response.json()["items"]) == 6
