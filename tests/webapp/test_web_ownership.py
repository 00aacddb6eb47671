"""Ownership over HTTP: submitters belong to their creator and the members staff add; every write
that touches someone's row (submissions, submitter edits, cancelling runs and rollouts) is refused
to other users. Two ordinary users (alice, bob) and a staff user (root)."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from webapp.accounts.services import api_token_create
from webapp.arena.models import Evaluation, Kernel, Submitter

pytestmark = pytest.mark.django_db


def _call(client, method, url, body=None, token=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    data = json.dumps(body) if body is not None else None
    return getattr(client, method)(url, data=data, content_type="application/json", **headers)


@pytest.fixture
def bob_token(django_user_model):
    user = django_user_model.objects.create_user(username="bob", password="x")
    return api_token_create(user=user, name="bob")[1]


@pytest.fixture
def users(django_user_model, api_token, bob_token, staff_token):
    get = django_user_model.objects.get
    return {
        "alice": (get(username="alice"), api_token),
        "bob": (get(username="bob"), bob_token),
        "root": (get(username="root"), staff_token),
    }


def _submit(client, token, task, submitter, source, **extra):
    body = {"task_id": task.pk, "submitter": submitter, "source": source, **extra}
    return _call(client, "post", "/api/kernels", body, token)


def test_a_new_submitter_is_its_creators_and_other_users_are_refused(
    client, users, make_task, new_kernel_source
):
    task = make_task()
    alice, alice_token = users["alice"]

    created = _submit(client, alice_token, task, "alice-model", new_kernel_source())
    again = _submit(client, alice_token, task, "alice-model", new_kernel_source())
    refused = _submit(client, users["bob"][1], task, "alice-model", new_kernel_source())
    by_staff = _submit(client, users["root"][1], task, "alice-model", new_kernel_source())

    submitter = Submitter.objects.get(name="alice-model")
    assert (created.status_code, again.status_code, by_staff.status_code) == (202, 202, 202)
    assert refused.status_code == 403
    assert refused.json()["detail"] == (
        "submitter 'alice-model' belongs to other users; choose another name, or ask a staff user "
        "to add you to its members"
    )
    assert submitter.created_by == alice
    assert list(submitter.members.values_list("username", flat=True)) == ["alice"]
    assert Kernel.objects.filter(submitter=submitter).count() == 3
    assert set(Evaluation.objects.values_list("requested_by__username", flat=True)) == {"alice", "root"}


def test_a_submitter_without_an_owner_takes_posts_from_staff_only(
    client, users, make_task, make_submitter, new_kernel_source
):
    task = make_task()
    make_submitter(name="reference-cpp", kind="human")  # seeded or imported: nobody's

    refused = _submit(client, users["alice"][1], task, "reference-cpp", new_kernel_source())
    by_staff = _submit(client, users["root"][1], task, "reference-cpp", new_kernel_source())

    assert (refused.status_code, by_staff.status_code) == (403, 202)
    assert Kernel.objects.count() == 1


def test_staff_add_and_remove_members(client, users, make_task, new_kernel_source):
    task = make_task()
    _submit(client, users["alice"][1], task, "team-model", new_kernel_source())
    url = "/api/submitters/team-model/members"

    by_bob = _call(client, "post", url, {"username": "bob"}, users["bob"][1])
    by_owner = _call(client, "post", url, {"username": "bob"}, users["alice"][1])
    added = _call(client, "post", url, {"username": "bob"}, users["root"][1])
    bob_posts = _submit(client, users["bob"][1], task, "team-model", new_kernel_source())
    no_user = _call(client, "post", url, {"username": "nobody"}, users["root"][1])
    removed = _call(client, "delete", f"{url}/bob", None, users["root"][1])
    bob_again = _submit(client, users["bob"][1], task, "team-model", new_kernel_source())
    detail = client.get("/api/submitters/team-model").json()

    assert (by_bob.status_code, by_owner.status_code) == (403, 403)
    assert by_bob.json()["detail"] == "only a staff user can change a submitter's members"
    assert (added.status_code, added.json()["members"]) == (200, ["alice", "bob"])
    assert bob_posts.status_code == 202
    assert (no_user.status_code, no_user.json()["detail"]) == (422, "no active user 'nobody'")
    assert (removed.status_code, removed.json()["members"]) == (200, ["alice"])
    assert bob_again.status_code == 403
    assert (detail["created_by"], detail["members"]) == ("alice", ["alice"])


def test_submitter_edits_need_a_member_or_staff(client, users, make_task, new_kernel_source):
    _submit(client, users["alice"][1], make_task(), "edited", new_kernel_source())
    url = "/api/submitters/edited"

    by_bob = _call(client, "patch", url, {"metadata": {"by": "bob"}}, users["bob"][1])
    by_owner = _call(client, "patch", url, {"metadata": {"base": "7B"}}, users["alice"][1])
    by_staff = _call(client, "patch", url, {"metadata": {"base": "8B"}}, users["root"][1])
    missing = _call(client, "patch", "/api/submitters/nope", {"metadata": {}}, users["root"][1])
    no_token = _call(client, "patch", url, {"metadata": {}})

    assert by_bob.status_code == 403
    assert by_bob.json()["detail"] == "only the members of submitter 'edited' or a staff user can edit it"
    assert (by_owner.status_code, by_owner.json()["metadata"]) == (200, {"base": "7B"})
    assert (by_staff.status_code, by_staff.json()["metadata"]) == (200, {"base": "8B"})
    assert (missing.status_code, no_token.status_code) == (404, 401)
    assert Submitter.objects.get(name="edited").metadata == {"base": "8B"}


def test_submitter_kind_is_honoured(client, users, make_task, new_kernel_source):
    task = make_task()
    token = users["alice"][1]

    created = _submit(client, token, task, "my-agent", new_kernel_source(), submitter_kind="agent")
    mismatch = _submit(client, token, task, "my-agent", new_kernel_source(), submitter_kind="model")
    unsaid = _submit(client, token, task, "my-agent", new_kernel_source())
    default = _submit(client, token, task, "my-model", new_kernel_source())

    assert (created.status_code, unsaid.status_code, default.status_code) == (202, 202, 202)
    assert mismatch.status_code == 409
    assert (
        mismatch.json()["detail"]
        == "submitter 'my-agent' has kind agent, not model; leave submitter_kind out"
    )
    assert dict(Submitter.objects.values_list("name", "kind")) == {"my-agent": "agent", "my-model": "model"}
    assert Kernel.objects.count() == 3


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../../admin", "the name must start with a letter or digit"),
        ("a" * 5000, "String should have at most 64 characters"),
        ("a" * 65, "String should have at most 64 characters"),
        ("x\x00y", "the name contains a NUL character"),
        ("x\ud800y", "Input should be a valid string, unable to parse raw data as a unicode string"),
        ("", "the name is empty"),
        ("a..b", "no '..'"),
        ("white space", "the name must start with a letter or digit"),
    ],
)
def test_bad_submitter_names_are_refused_with_the_reason(
    client, api_token, make_task, new_kernel_source, name, reason
):
    response = _submit(client, api_token, make_task(), name, new_kernel_source())

    assert response.status_code == 422
    assert reason in json.dumps(response.json()["detail"], ensure_ascii=False)
    assert (Submitter.objects.count(), Kernel.objects.count(), Evaluation.objects.count()) == (0, 0, 0)


def test_a_name_of_64_slug_characters_is_accepted(client, api_token, make_task, new_kernel_source):
    name = "qwen2.5-coder_7b+grpo@step" + "9" * 38

    response = _submit(client, api_token, make_task(), name, new_kernel_source())

    assert (response.status_code, len(name)) == (202, 64)
    assert Submitter.objects.get().name == name


def test_importing_kernels_under_another_users_submitter_is_refused(client, users, make_task):
    from django.core.files.uploadedfile import SimpleUploadedFile

    _submit(client, users["alice"][1], make_task(), "alice-import", "class ModelNew:\n    pass\n")
    rows = json.dumps({"level_id": 1, "task_id": 1, "custom_code": "class ModelNew:\n    pass\n"}) + "\n"

    refused = client.post(
        "/api/import/kernels",
        {"file": SimpleUploadedFile("k.jsonl", rows.encode()), "submitter": "alice-import"},
        HTTP_AUTHORIZATION=f"Bearer {users['bob'][1]}",
    )
    bad_name = client.post(
        "/api/import/kernels",
        {"file": SimpleUploadedFile("k.jsonl", rows.encode()), "submitter": "../x"},
        HTTP_AUTHORIZATION=f"Bearer {users['bob'][1]}",
    )
    suite = client.post("/api/import/suite", HTTP_AUTHORIZATION=f"Bearer {users['bob'][1]}")

    assert refused.status_code == 403
    assert bad_name.status_code == 422
    assert suite.status_code == 403
    assert Kernel.objects.count() == 1


# --- cancelling training runs and rollouts: owner or staff ------------------------------------------


@pytest.fixture
def make_training_run():
    from training.recipes import RunConfig
    from webapp.training_runs.conf import CONFIGS_DIR
    from webapp.training_runs.models import TrainingRun

    def make(*, created_by, status="queued"):
        config = RunConfig.load(CONFIGS_DIR / "tiny_cpu_grpo.json")
        return TrainingRun.objects.create(
            name="r",
            config=config.to_dict(),
            config_hash=config.config_hash(),
            base_model="tiny:tiny_llama",
            task_set="synthetic:4",
            status=status,
            total_steps=3,
            created_by=created_by,
        )

    return make


def test_training_cancel_over_the_api_needs_the_owner_or_staff(client, users, make_training_run):
    alice = users["alice"][0]
    run, other = make_training_run(created_by=alice), make_training_run(created_by=alice)

    by_bob = _call(client, "post", f"/api/training/{run.pk}/cancel", None, users["bob"][1])
    run.refresh_from_db()
    after_bob = (run.status, run.cancel_requested)
    by_owner = _call(client, "post", f"/api/training/{run.pk}/cancel", None, users["alice"][1])
    by_staff = _call(client, "post", f"/api/training/{other.pk}/cancel", None, users["root"][1])
    missing = _call(client, "post", "/api/training/987654/cancel", None, users["bob"][1])

    assert by_bob.status_code == 403
    assert by_bob.json()["detail"] == f"only the owner of training run {run.pk} or a staff user can do this"
    assert after_bob == ("queued", False)
    assert (by_owner.status_code, by_owner.json()["status"]) == (200, "cancelled")
    assert (by_staff.status_code, by_staff.json()["status"]) == (200, "cancelled")
    assert missing.status_code == 404


def test_rollout_cancel_over_the_api_needs_the_owner_or_staff(client, users, make_task, make_submitter):
    from agent import RolloutConfig
    from webapp.rollouts.models import Rollout

    def rollout():
        task = make_task()
        config = RolloutConfig.for_evaluation(max_turns=2, track="open", device="cpu", task_name=task.name)
        return Rollout.objects.create(
            task=task,
            submitter=make_submitter(kind="agent"),
            base_url="http://127.0.0.1:9/v1",
            model="m",
            settings={"config": config.to_dict()},
            created_by=users["alice"][0],
        )

    mine, other = rollout(), rollout()

    by_bob = _call(client, "post", f"/api/rollouts/{mine.pk}/cancel", None, users["bob"][1])
    mine.refresh_from_db()
    after_bob = (mine.status, mine.cancel_requested)
    by_owner = _call(client, "post", f"/api/rollouts/{mine.pk}/cancel", None, users["alice"][1])
    by_staff = _call(client, "post", f"/api/rollouts/{other.pk}/cancel", None, users["root"][1])

    assert by_bob.status_code == 403
    assert by_bob.json()["detail"] == f"only the owner of rollout {mine.pk} or a staff user can do this"
    assert after_bob == ("queued", False)
    assert (by_owner.status_code, by_owner.json()["status"]) == (200, "cancelled")
    assert (by_staff.status_code, by_staff.json()["status"]) == (200, "cancelled")


def test_rollouts_launch_only_under_a_submitter_the_user_may_use(client, users, make_task, make_submitter):
    from webapp.rollouts.models import Rollout
    from webapp.rollouts.services import llm_endpoint_register

    llm_endpoint_register(name="e", base_url="http://127.0.0.1:9/v1", model="m")
    task = make_task()
    body = {"task_id": task.pk, "submitter": "alice-agent", "endpoint": "e", "settings": {"max_turns": 1}}
    _call(client, "post", "/api/rollouts/", body, users["alice"][1])

    by_bob = _call(client, "post", "/api/rollouts/", body, users["bob"][1])
    page = Client()
    page.force_login(users["bob"][0])
    form = page.post(
        "/rollouts/new/",
        {
            "task": task.pk,
            "submitter": "alice-agent",
            "endpoint": "e",
            "max_turns": 1,
            "track": "open",
            "device": "cpu",
        },
    )

    assert by_bob.status_code == 403
    assert form.status_code == 403
    assert "belongs to other users" in form.content.decode()
    assert list(Rollout.objects.values_list("created_by__username", flat=True)) == ["alice"]
