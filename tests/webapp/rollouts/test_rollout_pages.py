"""Rollout pages: the launch form needs a login and launches; the list and the live page render."""

from __future__ import annotations

import pytest

from webapp.rollouts.models import Rollout

pytestmark = pytest.mark.django_db


@pytest.fixture
def user_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_user(username="bob", password="x"))
    return client


@pytest.fixture(autouse=True)
def vllm_endpoint(make_endpoint):
    return make_endpoint(name="vllm", base_url="http://vllm:8000/v1", model="m")


def test_launch_form_needs_a_login(client):
    response = client.get("/rollouts/new/")

    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/rollouts/new/")


def test_launch_form_launches_one_task(user_client, make_task):
    task = make_task()

    form = user_client.get(f"/rollouts/new/?task={task.pk}")
    response = user_client.post(
        "/rollouts/new/",
        {
            "task": task.pk,
            "submitter": "my-agent",
            "endpoint": "vllm",
            "max_turns": 12,
            "track": "open",
            "device": "cpu",
            "contrastive": "on",
        },
    )

    rollout = Rollout.objects.get()
    assert form.status_code == 200
    assert b'id="launch-form"' in form.content
    assert response.status_code == 302
    assert response["Location"] == f"/rollouts/{rollout.pk}/"
    assert (rollout.config["max_turns"], rollout.config["track"], rollout.settings["contrastive"]) == (
        12,
        "open",
        True,
    )
    assert rollout.created_by.username == "bob"
    assert (rollout.endpoint.name, rollout.base_url, rollout.model) == ("vllm", "http://vllm:8000/v1", "m")
    assert b'<option value="vllm"' in form.content


def test_launch_form_launches_a_suite(user_client, make_task):
    make_task(suite="mini")
    make_task(suite="mini")

    response = user_client.post(
        "/rollouts/new/",
        {
            "suite": "mini",
            "submitter": "a",
            "endpoint": "vllm",
            "max_turns": 2,
            "track": "strict",
            "device": "cpu",
        },
    )

    assert response.status_code == 302
    assert Rollout.objects.filter(task__suite="mini").count() == 2
    assert "?batch=" in response["Location"]


def test_launch_form_shows_clear_errors(user_client, make_task):
    task = make_task()

    bad_url = user_client.post(
        "/rollouts/new/",
        {
            "task": task.pk,
            "submitter": "a",
            "endpoint": "http://169.254.169.254/latest",
            "max_turns": 2,
            "track": "strict",
            "device": "cpu",
        },
    )
    neither = user_client.post(
        "/rollouts/new/",
        {
            "submitter": "a",
            "endpoint": "vllm",
            "max_turns": 2,
            "track": "strict",
            "device": "cpu",
        },
    )

    assert bad_url.status_code == 400
    assert "Select a valid choice" in bad_url.content.decode()
    assert neither.status_code == 400
    assert "Choose one task, or a whole suite" in neither.content.decode()
    assert Rollout.objects.count() == 0


def test_list_and_detail_pages(client, make_rollout, store_events, django_assert_max_num_queries):
    rollouts = [make_rollout(status="running") for _ in range(4)]
    store_events(rollouts[0].pk, range(3))

    with django_assert_max_num_queries(4):
        listed = client.get("/rollouts/")
    detail = client.get(f"/rollouts/{rollouts[0].pk}/")
    missing = client.get("/rollouts/987654/")

    assert listed.status_code == 200
    assert listed.content.decode().count("data-rollout=") == 4
    assert detail.status_code == 200
    assert f'data-rollout-id="{rollouts[0].pk}"' in detail.content.decode()
    assert "rollouts/rollout.js" in detail.content.decode()
    assert missing.status_code == 404


def test_cancel_from_the_page(user_client, make_rollout, django_user_model):
    from django.test import Client

    rollout = make_rollout(created_by=django_user_model.objects.get(username="bob"))
    other = Client()
    other.force_login(django_user_model.objects.create_user(username="eve", password="x"))

    anonymous = Client().post(f"/rollouts/{rollout.pk}/cancel/")
    refused = other.post(f"/rollouts/{rollout.pk}/cancel/")
    refused_page = other.get(f"/rollouts/{rollout.pk}/")
    rollout.refresh_from_db()
    status_after_refusal = rollout.status
    owner_page = user_client.get(f"/rollouts/{rollout.pk}/")
    response = user_client.post(f"/rollouts/{rollout.pk}/cancel/")

    rollout.refresh_from_db()
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert (refused.status_code, status_after_refusal) == (403, "queued")
    assert b'id="cancel-button"' not in refused_page.content
    assert b'id="cancel-button"' in owner_page.content
    assert response.status_code == 302
    assert (rollout.status, rollout.cancel_requested) == ("cancelled", True)


def test_admin_add_goes_to_the_launch_form_and_admin_cancels(admin_client, make_rollout):
    rollout = make_rollout()

    add = admin_client.get("/admin/rollouts/rollout/add/")
    changelist = admin_client.get("/admin/rollouts/rollout/")
    action = admin_client.post(
        "/admin/rollouts/rollout/", {"action": "cancel", "_selected_action": [rollout.pk]}
    )

    rollout.refresh_from_db()
    assert (add.status_code, add["Location"]) == (302, "/rollouts/new/")
    assert changelist.status_code == 200
    assert action.status_code == 302
    assert rollout.status == "cancelled"


def test_admin_relaunch_copies_the_settings(admin_client, make_rollout, vllm_endpoint):
    rollout = make_rollout(status="succeeded", max_turns=9, endpoint=vllm_endpoint)

    admin_client.post("/admin/rollouts/rollout/", {"action": "relaunch", "_selected_action": [rollout.pk]})

    again = Rollout.objects.exclude(pk=rollout.pk).get()
    assert (again.status, again.config["max_turns"], again.config["track"]) == ("queued", 9, "open")
    assert (again.task_id, again.submitter_id, again.endpoint_id, again.base_url) == (
        rollout.task_id,
        rollout.submitter_id,
        vllm_endpoint.pk,
        "http://vllm:8000/v1",
    )


def test_staff_register_endpoints_in_the_admin_and_the_key_is_only_named(admin_client):
    from webapp.rollouts.models import LlmEndpoint

    form = {"name": "vllm-b", "model": "Qwen/Qwen3-8B", "description": "", "enabled": "on"}
    bad = admin_client.post(
        "/admin/rollouts/llmendpoint/add/",
        {**form, "base_url": "file:///etc/passwd", "api_key_env": "sk-live-123"},
    )
    good = admin_client.post(
        "/admin/rollouts/llmendpoint/add/",
        {**form, "base_url": "http://vllm-b:8000/v1", "api_key_env": "VLLM_B_KEY"},
    )

    assert bad.status_code == 200  # the form again, with its errors
    assert "An http:// or https:// URL of an OpenAI-compatible API" in bad.content.decode()
    assert "An environment variable name" in bad.content.decode()
    assert good.status_code == 302
    endpoint = LlmEndpoint.objects.get(name="vllm-b")
    assert (endpoint.base_url, endpoint.api_key_env) == ("http://vllm-b:8000/v1", "VLLM_B_KEY")
