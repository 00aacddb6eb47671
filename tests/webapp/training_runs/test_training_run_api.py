"""/api/training/: launch (Bearer token), list, detail, metrics after a step, samples of a step, cancel."""

from __future__ import annotations

import pytest
from training_run_helpers import tiny_overrides

from webapp.training_runs.models import TrainingRun

pytestmark = pytest.mark.django_db


def _auth(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def test_writes_need_a_token(client, make_run):
    run = make_run()

    launch = client.post("/api/training/", {"recipe": "tiny_cpu_grpo"}, content_type="application/json")
    bad_token = client.post(
        "/api/training/", {"recipe": "tiny_cpu_grpo"}, content_type="application/json", **_auth("nope")
    )
    cancel = client.post(f"/api/training/{run.pk}/cancel")

    assert (launch.status_code, bad_token.status_code, cancel.status_code) == (401, 401, 401)
    assert TrainingRun.objects.count() == 1
    run.refresh_from_db()
    assert run.cancel_requested is False


def test_launch_from_a_recipe_with_overrides(client, api_token):
    response = client.post(
        "/api/training/",
        {
            "name": "api run",
            "recipe": "tiny_cpu_grpo",
            "task_set": "synthetic:3",
            "overrides": tiny_overrides(steps=2),
        },
        content_type="application/json",
        **_auth(api_token),
    )

    run = TrainingRun.objects.get()
    assert response.status_code == 202
    assert response.json() == {
        "id": run.pk,
        "status": "queued",
        "config_hash": run.config_hash,
        "stream": f"/ws/training/{run.pk}/?after_step=0",
    }
    assert (run.name, run.recipe, run.total_steps, run.created_by.username) == (
        "api run",
        "tiny_cpu_grpo",
        2,
        "alice",
    )
    assert run.config["data"]["sources"] == [{"kind": "synthetic", "n": 3}]


@pytest.mark.parametrize(
    "body, detail",
    [
        ({"recipe": "no_such_recipe"}, "no recipe 'no_such_recipe'"),
        ({"recipe": "../../etc/passwd"}, "no recipe"),
        ({}, "give exactly one of recipe or config"),
        ({"config": {"name": "x", "stages": []}}, "a run needs at least one stage"),
        ({"recipe": "tiny_cpu_grpo", "overrides": {"optim": {"lrr": 1}}}, "unknown optim fields: ['lrr']"),
    ],
)
def test_a_bad_launch_is_a_clear_422_and_stores_nothing(client, api_token, body, detail):
    response = client.post("/api/training/", body, content_type="application/json", **_auth(api_token))

    assert response.status_code == 422
    assert detail in response.json()["detail"]
    assert TrainingRun.objects.count() == 0


def test_list_detail_metrics_and_samples(client, make_run, django_assert_max_num_queries):
    run = make_run(steps=5)
    make_run(steps=0, status="queued")

    with django_assert_max_num_queries(2):
        listing = client.get("/api/training/?page_size=1").json()
    detail = client.get(f"/api/training/{run.pk}").json()
    first = client.get(f"/api/training/{run.pk}/metrics?after_step=0&limit=3").json()
    rest = client.get(f"/api/training/{run.pk}/metrics?after_step={first['next_after_step']}&limit=3").json()
    samples = client.get(f"/api/training/{run.pk}/samples?step=2").json()
    latest = client.get(f"/api/training/{run.pk}/samples").json()
    missing = client.get("/api/training/999999/metrics")

    assert (listing["count"], listing["page_size"], len(listing["items"])) == (2, 1, 1)
    assert (
        detail["id"] == run.pk and detail["checkpoints"] == [] and detail["config"]["name"] == "tiny_cpu_grpo"
    )
    assert [m["step"] for m in first["items"]] == [1, 2, 3] and first["has_more"] is True
    assert [m["step"] for m in rest["items"]] == [4, 5] and rest["has_more"] is False
    assert rest["next_after_step"] == 5
    assert first["items"][0]["data"]["reward_mean"] == pytest.approx(0.1)
    assert [(s["step"], s["position"], s["response"]) for s in samples["items"]] == [
        (2, 0, "reply 0 at step 2"),
        (2, 1, "reply 1 at step 2"),
    ]
    assert samples["items"][0]["speedup_eager"] == 1.5
    assert latest["step"] == 5
    assert missing.status_code == 404


def test_cancel_through_the_api(client, make_run, api_token, django_user_model):
    run = make_run(status="queued", created_by=django_user_model.objects.get(username="alice"))

    response = client.post(f"/api/training/{run.pk}/cancel", **_auth(api_token))

    run.refresh_from_db()
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert (run.status, run.cancel_requested) == ("cancelled", True)
