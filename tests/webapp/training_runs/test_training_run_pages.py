"""Training pages and the admin: the run page's query budget, the list, launch and cancel from the admin."""

from __future__ import annotations

import pytest
from training_run_helpers import store_step

from webapp.training_runs import services
from webapp.training_runs.models import TrainingRun

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client, django_user_model):
    client.force_login(
        django_user_model.objects.create_user(username="ops", password="x", is_staff=True, is_superuser=True)
    )
    return client


def test_run_page_query_budget_does_not_grow_with_steps_or_checkpoints(
    client, make_run, django_assert_max_num_queries
):
    small = make_run(steps=1)
    big = make_run(steps=12)
    for step in (4, 8, 12):
        services.training_checkpoint_store(
            run_id=big.pk, info={"step": step, "stage": "grpo", "path": f"/ck/{step}"}
        )

    with django_assert_max_num_queries(3):
        small_page = client.get(f"/training/{small.pk}/")
    with django_assert_max_num_queries(3):
        big_page = client.get(f"/training/{big.pk}/")

    body = big_page.content.decode()
    assert small_page.status_code == big_page.status_code == 200
    assert 'id="step-slider"' in body and 'max="12"' in body
    assert 'id="training-metrics" type="application/json"' in body
    assert "/static/vendor/plotly.min.js" in body
    assert f'href="/submitters/train{big.pk}-factory@step12/"' in body
    assert body.count('class="checkpoint-submitter"') == 3


def test_model_text_is_escaped_in_the_embedded_metrics(client, make_run):
    run = make_run()
    store_step(run.pk, 1, text=lambda step, i: "</script><script>alert(1)</script>")

    body = client.get(f"/training/{run.pk}/").content.decode()

    assert "<script>alert(1)" not in body


def test_list_page(client, make_run, django_assert_max_num_queries):
    make_run(steps=2)
    make_run(status="failed")

    with django_assert_max_num_queries(2):
        response = client.get("/training/?status=failed")

    assert response.status_code == 200
    assert response.content.decode().count('data-run="') == 1


def test_unknown_run_is_404(client):
    assert client.get("/training/424242/").status_code == 404


def test_admin_launch_form_launches_a_recipe_with_overrides(staff_client):
    form = staff_client.get("/admin/training_runs/trainingrun/add/")
    response = staff_client.post(
        "/admin/training_runs/trainingrun/add/",
        {
            "name": "from admin",
            "recipe": "tiny_cpu_grpo",
            "config_json": "",
            "base_model": "tiny:tiny_llama",
            "task_set": "synthetic:2",
            "overrides": '{"stages": [{"name": "g", "kind": "grpo", "steps": 2}]}',
        },
    )

    run = TrainingRun.objects.get()
    assert form.status_code == 200
    assert b'<option value="tiny_cpu_grpo">' in form.content
    assert response.status_code == 302 and response["Location"] == f"/training/{run.pk}/"
    assert (run.name, run.recipe, run.total_steps, run.status) == ("from admin", "tiny_cpu_grpo", 2, "queued")
    assert run.created_by.username == "ops"


def test_admin_launch_form_shows_config_errors_and_stores_nothing(staff_client):
    bad_json = staff_client.post(
        "/admin/training_runs/trainingrun/add/", {"recipe": "", "config_json": "{not json", "overrides": ""}
    )
    bad_config = staff_client.post(
        "/admin/training_runs/trainingrun/add/",
        {"recipe": "", "config_json": '{"name": "x", "stages": []}', "overrides": ""},
    )

    assert bad_json.status_code == bad_config.status_code == 400
    assert b"the config is not valid JSON" in bad_json.content
    assert b"a run needs at least one stage" in bad_config.content
    assert TrainingRun.objects.count() == 0


def test_admin_cancel_action(staff_client, make_run):
    queued = make_run(status="queued")
    running = make_run(status="running")

    staff_client.post(
        "/admin/training_runs/trainingrun/", {"action": "cancel", "_selected_action": [queued.pk, running.pk]}
    )

    queued.refresh_from_db()
    running.refresh_from_db()
    assert (queued.status, queued.cancel_requested) == ("cancelled", True)
    assert (running.status, running.cancel_requested) == ("running", True)  # stops before its next step


def test_cancel_from_the_page_needs_the_owner_or_staff(staff_client, make_run, django_user_model):
    from django.test import Client

    owner = django_user_model.objects.create_user(username="owner", password="x")
    plain = django_user_model.objects.create_user(username="pleb", password="x")
    client = Client()  # not the staff one
    run = make_run(status="running", created_by=owner)
    other = make_run(status="running", created_by=owner)
    mine = make_run(status="running", created_by=owner)

    anonymous = client.post(f"/training/{run.pk}/cancel/")
    client.force_login(plain)
    not_owner = client.post(f"/training/{run.pk}/cancel/")
    not_owner_page = client.get(f"/training/{run.pk}/")
    by_staff = staff_client.post(f"/training/{other.pk}/cancel/")
    client.force_login(owner)
    owner_page = client.get(f"/training/{mine.pk}/")
    by_owner = client.post(f"/training/{mine.pk}/cancel/")

    for row in (run, other, mine):
        row.refresh_from_db()
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert not_owner.status_code == 403
    assert run.cancel_requested is False
    assert b'id="cancel-button"' not in not_owner_page.content
    assert b'id="cancel-button"' in owner_page.content
    assert by_staff.status_code == 302 and by_staff["Location"] == f"/training/{other.pk}/"
    assert other.cancel_requested is True
    assert by_owner.status_code == 302 and mine.cancel_requested is True
