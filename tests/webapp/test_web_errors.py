"""A job's error (a worker's traceback) is shown to its owner without server paths, to staff in full,
and to nobody else: training runs and rollouts, over the API and on their pages."""

from __future__ import annotations

import pytest
from django.test import Client

from webapp.accounts.services import api_token_create

pytestmark = pytest.mark.django_db

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/srv/kernelcourt/training/runner.py", line 88, in run_training\n'
    "FileNotFoundError: [Errno 2] No such file or directory: '/data/secret/tasks.jsonl'\n"
)
SCRUBBED = (
    "Traceback (most recent call last):\n"
    '  File "…/runner.py", line 88, in run_training\n'
    "FileNotFoundError: [Errno 2] No such file or directory: '…/tasks.jsonl'\n"
)


@pytest.fixture
def people(django_user_model):
    out = {}
    for name, staff in (("alice", False), ("bob", False), ("root", True)):
        user = django_user_model.objects.create_user(username=name, password="x", is_staff=staff)
        out[name] = (user, api_token_create(user=user)[1])
    return out


def _get(url, token=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return Client().get(url, **headers)


def _page(url, user=None):
    client = Client()
    if user is not None:
        client.force_login(user)
    return client.get(url).content.decode()


def test_a_training_runs_error_by_viewer(people):
    from training.recipes import RunConfig
    from webapp.training_runs.conf import CONFIGS_DIR
    from webapp.training_runs.models import TrainingRun

    config = RunConfig.load(CONFIGS_DIR / "tiny_cpu_grpo.json")
    run = TrainingRun.objects.create(
        name="failing",
        config=config.to_dict(),
        config_hash=config.config_hash(),
        base_model="tiny:tiny_llama",
        task_set="synthetic:4",
        status="failed",
        total_steps=1,
        error=TRACEBACK,
        created_by=people["alice"][0],
    )
    url = f"/api/training/{run.pk}"

    seen = {name: _get(url, token).json()["error"] for name, (_, token) in people.items()}
    listed = _get("/api/training/", people["alice"][1]).json()["items"][0]["error"]
    anonymous = _get(url).json()["error"]
    pages = {name: _page(f"/training/{run.pk}/", user) for name, (user, _) in people.items()}

    assert seen == {"alice": SCRUBBED, "bob": "", "root": TRACEBACK}
    assert (listed, anonymous) == (SCRUBBED, "")
    assert "…/runner.py" in pages["alice"] and "/srv/kernelcourt" not in pages["alice"]
    assert "runner.py" not in pages["bob"]
    assert "/srv/kernelcourt/training/runner.py" in pages["root"]


def test_a_rollouts_error_and_its_error_event_by_viewer(people, make_task, make_submitter):
    from agent import RolloutConfig, TrajectoryEvent
    from webapp.rollouts.models import Rollout
    from webapp.rollouts.services import rollout_event_store

    task = make_task()
    config = RolloutConfig.for_evaluation(max_turns=2, track="open", device="cpu", task_name=task.name)
    rollout = Rollout.objects.create(
        task=task,
        submitter=make_submitter(kind="agent"),
        base_url="http://127.0.0.1:9/v1",
        model="m",
        settings={"config": config.to_dict()},
        status="failed",
        error=TRACEBACK,
        created_by=people["alice"][0],
    )
    rollout_event_store(
        rollout_id=rollout.pk,
        event=TrajectoryEvent(
            rollout_id=str(rollout.pk), seq=0, kind="error", role="system", content=TRACEBACK
        ),
    )

    detail = {n: _get(f"/api/rollouts/{rollout.pk}", t).json()["error"] for n, (_, t) in people.items()}
    events = {
        n: _get(f"/api/rollouts/{rollout.pk}/events", t).json()["items"][0]["content"]
        for n, (_, t) in people.items()
    }
    pages = {name: _page(f"/rollouts/{rollout.pk}/", user) for name, (user, _) in people.items()}

    assert detail == {"alice": SCRUBBED, "bob": "", "root": TRACEBACK}
    hidden = "the rollout failed; its owner and staff see the error on the rollout's page"
    assert events == {"alice": SCRUBBED, "bob": hidden, "root": SCRUBBED}
    assert "…/runner.py" in pages["alice"] and "/srv/kernelcourt" not in pages["alice"]
    assert "runner.py" not in pages["bob"]
    assert "/srv/kernelcourt/training/runner.py" in pages["root"]


def test_an_evaluator_error_by_viewer(people, make_evaluation):
    evaluation = make_evaluation(status="error", hardware=False)
    evaluation.error = TRACEBACK
    evaluation.requested_by = people["alice"][0]
    evaluation.save()
    kernel_id = evaluation.kernel_id

    detail = {n: _get(f"/api/evaluations/{evaluation.pk}", t).json()["error"] for n, (_, t) in people.items()}
    in_kernel = _get(f"/api/kernels/{kernel_id}", people["alice"][1]).json()["evaluations"][0]["error"]
    listed = _get("/api/evaluations", people["bob"][1]).json()["items"][0]["error"]
    pages = {name: _page(f"/kernels/{kernel_id}/", user) for name, (user, _) in people.items()}

    assert detail == {"alice": SCRUBBED, "bob": "", "root": TRACEBACK}
    assert (in_kernel, listed) == (SCRUBBED, "")
    assert "…/runner.py" in pages["alice"] and "/srv/kernelcourt" not in pages["alice"]
    assert "runner.py" not in pages["bob"]
    assert "/srv/kernelcourt/training/runner.py" in pages["root"]
