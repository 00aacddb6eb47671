"""Validation before writing, over HTTP: every string a client sends (schema fields, nested JSON,
query parameters, form fields) is bounded and NUL/surrogate-safe, answered with a 4xx that says why,
and nothing is written."""

from __future__ import annotations

import json

import pytest
from django.apps import apps

pytestmark = pytest.mark.django_db

NUL = "bad\x00text"
SURROGATE = "bad\ud800text"
LONG = "x" * 30_000

WRITABLE = [
    "arena.Kernel",
    "arena.Submitter",
    "arena.Evaluation",
    "arena.Task",
    "review.Flag",
    "review.ReviewerRule",
    "rollouts.Rollout",
    "rollouts.RolloutBatch",
    "training_runs.TrainingRun",
    "accounts.UsageEvent",
]


def _counts() -> dict[str, int]:
    return {name: apps.get_model(name).objects.count() for name in WRITABLE}


def _post(client, url, body, token):
    return client.post(
        url, data=json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


@pytest.fixture
def reviewer_token(django_user_model):
    from django.contrib.auth.models import Permission

    from webapp.accounts.services import api_token_create

    user = django_user_model.objects.create_user(username="rev", password="x")
    user.user_permissions.add(Permission.objects.get(codename="decide"))
    return api_token_create(user=user)[1]


def _bodies(task_id: int, kernel_id: int):
    """(url, body with one bad string in it) for every field of every write schema."""
    source = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"
    kernel = {"task_id": task_id, "submitter": "s", "source": source}
    rollout = {"task_id": task_id, "submitter": "s", "endpoint": "e", "settings": {}}
    training = {"recipe": "tiny_cpu_grpo"}
    rule = {"name": "r", "kind": "regex", "pattern": "x", "message": "m"}
    for bad in (NUL, SURROGATE, LONG):
        yield "/api/kernels", {**kernel, "task_id": None, "task": bad}
        yield "/api/kernels", {**kernel, "task_id": None, "task": "t", "suite": bad}
        yield "/api/kernels", {**kernel, "submitter": bad}
        # a source is bounded in bytes (KERNEL_SOURCE_MAX_BYTES, 413), not by the text limit
        yield "/api/kernels", {**kernel, "source": source + "# " + (bad if bad != LONG else bad * 10)}
        yield "/api/rollouts/", {**rollout, "task_id": None, "suite": bad}
        yield "/api/rollouts/", {**rollout, "submitter": bad}
        yield "/api/rollouts/", {**rollout, "endpoint": bad}
        yield "/api/rollouts/", {**rollout, "settings": {"seed": 1, "note": {"deep": [bad]}}}
        yield "/api/rollouts/", {**rollout, "settings": {bad: 1}}
        yield "/api/training/", {**training, "name": bad}
        yield "/api/training/", {"recipe": bad}
        yield "/api/training/", {**training, "base_model": bad}
        yield "/api/training/", {**training, "task_set": bad}
        yield (
            "/api/training/",
            {"config": {"name": bad, "stages": [{"name": "g", "kind": "grpo", "steps": 1}]}},
        )
        yield (
            "/api/training/",
            {**training, "overrides": {"data": {"sources": [{"kind": "jsonl", "path": bad}]}}},
        )
        yield "/api/review/flags", {"kernel_id": kernel_id, "reason": bad}
        yield "/api/review/verdicts", {"kernel_id": kernel_id, "verdict": "hack", "notes": bad}
        yield "/api/review/verdicts", {"kernel_id": kernel_id, "verdict": bad}
        yield "/api/review/rules", {**rule, "name": bad}
        yield "/api/review/rules", {**rule, "pattern": bad}
        yield "/api/review/rules", {**rule, "message": bad}
        yield "/api/import/kernelbench", {"path": bad}


def test_no_bad_string_in_any_write_schema_is_stored_or_a_500(
    client, staff_token, reviewer_token, make_task, make_kernel
):
    task = make_task()
    kernel = make_kernel(task=task)
    before = _counts()
    answers = []

    for url, body in _bodies(task.pk, kernel.pk):
        token = reviewer_token if url.startswith("/api/review") else staff_token
        response = _post(client, url, body, token)
        answers.append((url, response.status_code, response.content.decode()[:300]))

    assert len(answers) == 66
    assert [a for a in answers if a[1] not in (413, 422)] == []
    assert _counts() == before
    # each refusal says why
    reasons = ("NUL", "surrogate", "unicode string", "at most", "characters long", "limit")
    assert [a for a in answers if not any(r in a[2] for r in reasons)] == []


@pytest.mark.parametrize(
    "url",
    [
        "/api/tasks?q={}",
        "/api/tasks?suite={}",
        "/api/kernels?submitter={}",
        "/api/evaluations?submitter={}",
        "/api/evaluations?hardware={}",
        "/api/submitters?kind={}",
        "/api/leaderboard?suite={}",
        "/api/leaderboard/entries?submitter={}",
        "/api/rollouts/?submitter={}",
        "/api/training/?status={}",
    ],
)
def test_bad_query_parameters_are_422_not_500(client, url):
    nul = client.get(url.format("%00"))
    long = client.get(url.format("x" * 300))

    assert (nul.status_code, long.status_code) == (422, 422)
    assert "NUL" in json.dumps(nul.json()["detail"])


def test_the_rollout_form_refuses_bad_text_and_writes_nothing(client, django_user_model, make_task):
    from webapp.rollouts.services import llm_endpoint_register

    llm_endpoint_register(name="e", base_url="http://127.0.0.1:9/v1", model="m")
    client.force_login(django_user_model.objects.create_user(username="formy", password="x"))
    task = make_task()
    base = {"task": task.pk, "endpoint": "e", "max_turns": 2, "track": "open", "device": "cpu"}

    nul = client.post("/rollouts/new/", {**base, "submitter": NUL})
    long = client.post("/rollouts/new/", {**base, "submitter": "x" * 65})
    slug = client.post("/rollouts/new/", {**base, "submitter": "../../admin"})

    assert (nul.status_code, long.status_code, slug.status_code) == (400, 400, 400)
    assert "Null characters are not allowed" in nul.content.decode()
    assert "at most 64 characters" in long.content.decode()
    assert "must start with a letter or digit" in slug.content.decode()
    assert _counts()["rollouts.Rollout"] == 0


def test_the_training_launch_form_refuses_nul_inside_the_json(admin_client):
    from webapp.training_runs.models import TrainingRun

    response = admin_client.post(
        "/admin/training_runs/trainingrun/add/",
        {"recipe": "tiny_cpu_grpo", "overrides": json.dumps({"data": {"prompt_style": NUL}})},
    )

    assert response.status_code == 400
    assert "the overrides has a string that contains a NUL character" in response.content.decode()
    assert TrainingRun.objects.count() == 0


def test_the_flag_form_on_the_kernel_page_refuses_a_nul_reason(client, django_user_model, make_kernel):
    from webapp.review.models import Flag

    kernel = make_kernel()
    client.force_login(django_user_model.objects.create_user(username="flagger", password="x"))

    response = client.post(f"/review/kernels/{kernel.pk}/flag/", {"reason": NUL}, follow=True)

    assert response.status_code == 200
    assert "the reason contains a NUL character" in response.content.decode()
    assert Flag.objects.count() == 0


@pytest.mark.parametrize(
    "url",
    [
        "/entries/?submitter=%00",
        "/submitters/a%00b/",
        "/tasks/?q=%00",
        "/tasks/?suite=%00",
        "/?suite=%00",
        "/rollouts/?submitter=%00",
        "/training/?status=%00",
        "/tasks/?%00=1",
    ],
)
def test_a_nul_in_a_pages_url_is_a_400_not_a_500(client, url):
    client.raise_request_exception = False

    response = client.get(url)

    assert response.status_code == 400


def test_a_nul_in_an_api_path_is_a_json_400(client):
    response = client.get("/api/submitters/a%00b")

    assert (response.status_code, response.json()) == (
        400,
        {"detail": "the URL path contains a NUL character"},
    )
