"""Per-user rate limits and queue caps over HTTP: 429 with a message that says which limit and when
to retry; nothing is written. The limits' clock is frozen (webapp.accounts.services.now), so a
window is counted without waiting for one."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from webapp.accounts.services import api_token_create
from webapp.arena.models import Evaluation, Kernel

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


@pytest.fixture
def clock(monkeypatch):
    """The limits' clock, moved by hand: ``clock.at = T0 + timedelta(...)``."""

    class Clock:
        at = T0

    frozen = Clock()
    monkeypatch.setattr("webapp.accounts.services.now", lambda: frozen.at)
    return frozen


@pytest.fixture
def bob_token(django_user_model):
    return api_token_create(user=django_user_model.objects.create_user(username="bob", password="x"))[1]


def _post(client, url, body, token):
    return client.post(
        url, data=json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def _submit(client, token, task, source, submitter="limited"):
    return _post(
        client, "/api/kernels", {"task_id": task.pk, "submitter": submitter, "source": source}, token
    )


def test_submissions_per_minute_per_user(
    client, settings, clock, api_token, bob_token, staff_token, make_task, new_kernel_source
):
    settings.LIMIT_SUBMISSIONS_PER_MINUTE = 3
    task = make_task()

    first = [_submit(client, api_token, task, new_kernel_source()).status_code for _ in range(3)]
    refused = _submit(client, api_token, task, new_kernel_source())
    other_user = _submit(client, bob_token, task, new_kernel_source(), submitter="bobs")
    staff = [
        _submit(client, staff_token, task, new_kernel_source(), submitter="ops").status_code for _ in range(4)
    ]
    clock.at = T0 + timedelta(seconds=45)
    still_refused = _submit(client, api_token, task, new_kernel_source())
    clock.at = T0 + timedelta(seconds=60)
    window_moved = _submit(client, api_token, task, new_kernel_source())

    assert first == [202, 202, 202]
    assert refused.status_code == 429
    assert refused.json() == {
        "detail": "rate limit: at most 3 submissions per 60 s per user; try again in 60 s"
    }
    assert (other_user.status_code, staff) == (202, [202, 202, 202, 202])
    assert still_refused.json()["detail"].endswith("try again in 15 s")
    assert window_moved.status_code == 202
    assert Kernel.objects.filter(submitter__name="limited").count() == 4


def test_queued_evaluations_per_user(client, settings, api_token, make_task, new_kernel_source):
    settings.LIMIT_QUEUED_EVALUATIONS = 2
    task = make_task()

    accepted = [_submit(client, api_token, task, new_kernel_source()).status_code for _ in range(2)]
    capped = _submit(client, api_token, task, new_kernel_source())
    Evaluation.objects.filter(pk=Evaluation.objects.order_by("id").first().pk).update(status="passed")
    after_one_finished = _submit(client, api_token, task, new_kernel_source())

    assert accepted == [202, 202]
    assert (capped.status_code, capped.json()["detail"]) == (
        429,
        "queue cap: at most 2 evaluations queued or running per user; you have 2; wait for some to finish",
    )
    assert after_one_finished.status_code == 202
    assert Kernel.objects.count() == 3


def test_an_import_over_the_queue_cap_is_refused_whole(client, settings, api_token, make_task):
    from django.core.files.uploadedfile import SimpleUploadedFile

    settings.LIMIT_QUEUED_EVALUATIONS = 2
    make_task(suite="kernelbench", level=1, name="1_relu")
    code = "import torch\nclass ModelNew(torch.nn.Module):\n    pass  # {}\n"
    rows = "".join(
        json.dumps({"level_id": 1, "task_id": 1, "custom_code": code.format(i)}) + "\n" for i in range(3)
    )

    response = client.post(
        "/api/import/kernels",
        {"file": SimpleUploadedFile("k.jsonl", rows.encode()), "submitter": "bulk"},
        HTTP_AUTHORIZATION=f"Bearer {api_token}",
    )

    assert response.status_code == 429
    assert response.json()["detail"] == (
        "queue cap: at most 2 evaluations queued or running per user; you have 0 and asked for 3 more; "
        "wait for some to finish"
    )
    assert (Kernel.objects.count(), Evaluation.objects.count()) == (0, 0)


@pytest.fixture
def endpoint():
    from webapp.rollouts.services import llm_endpoint_register

    return llm_endpoint_register(name="e", base_url="http://127.0.0.1:9/v1", model="m")


def test_rollout_launches_and_queued_rollouts_per_user(
    client, settings, clock, api_token, endpoint, make_task
):
    from webapp.rollouts.models import Rollout

    settings.LIMIT_QUEUED_ROLLOUTS = 2
    settings.LIMIT_ROLLOUT_LAUNCHES_PER_MINUTE = 2
    make_task(suite="trio"), make_task(suite="trio"), make_task(suite="trio")
    one = make_task(suite="one")
    body = {"submitter": "agent-a", "endpoint": "e", "settings": {"max_turns": 1}}

    suite = _post(client, "/api/rollouts/", {**body, "suite": "trio"}, api_token)
    single = _post(client, "/api/rollouts/", {**body, "task_id": one.pk}, api_token)
    second = _post(client, "/api/rollouts/", {**body, "task_id": one.pk}, api_token)
    Rollout.objects.update(status="succeeded")
    rate = _post(client, "/api/rollouts/", {**body, "task_id": one.pk}, api_token)

    assert suite.status_code == 429
    assert suite.json()["detail"] == (
        "queue cap: at most 2 rollouts queued or running per user; you have 0 and asked for 3 more; "
        "wait for some to finish"
    )
    assert (single.status_code, second.status_code) == (202, 202)
    assert rate.status_code == 429
    assert (
        rate.json()["detail"] == "rate limit: at most 2 rollout launches per 60 s per user; try again in 60 s"
    )
    assert Rollout.objects.count() == 2


def test_queued_training_runs_per_user(client, settings, clock, api_token, staff_token):
    from webapp.training_runs.models import TrainingRun

    settings.LIMIT_QUEUED_TRAINING_RUNS = 1
    body = {"recipe": "tiny_cpu_grpo"}

    first = _post(client, "/api/training/", body, api_token)
    capped = _post(client, "/api/training/", body, api_token)
    staff = [_post(client, "/api/training/", body, staff_token).status_code for _ in range(2)]

    assert first.status_code == 202
    assert (capped.status_code, capped.json()["detail"]) == (
        429,
        "queue cap: at most 1 training runs queued or running per user; you have 1; wait for some to finish",
    )
    assert staff == [202, 202]
    assert TrainingRun.objects.count() == 3


def test_the_rollout_form_says_429_with_the_message(
    client, settings, clock, django_user_model, endpoint, make_task
):
    from webapp.rollouts.models import Rollout

    settings.LIMIT_ROLLOUT_LAUNCHES_PER_MINUTE = 1
    client.force_login(django_user_model.objects.create_user(username="pager", password="x"))
    task = make_task()
    form = {
        "task": task.pk,
        "submitter": "pager-agent",
        "endpoint": "e",
        "max_turns": 1,
        "track": "open",
        "device": "cpu",
    }

    first = client.post("/rollouts/new/", form)
    second = client.post("/rollouts/new/", form)

    assert first.status_code == 302
    assert second.status_code == 429
    assert (
        "rate limit: at most 1 rollout launches per 60 s per user; try again in 60 s"
        in second.content.decode()
    )
    assert Rollout.objects.count() == 1
