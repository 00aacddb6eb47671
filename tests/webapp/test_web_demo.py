"""The demo: its data setup is idempotent, it makes an admin and a reviewer login, and its hack kernels
reach the review queue through real evaluations (the slow C++ ones are not run here)."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model

from webapp.arena import importers, services
from webapp.arena.demo import DEMO_KERNELS, GELU_TF32, GELU_THREAD, MATMUL_FALLBACK, SILU_BF16
from webapp.arena.management.commands.demo import Command
from webapp.arena.models import Evaluation, Kernel, Submitter
from webapp.review.models import ReviewCase

pytestmark = pytest.mark.django_db


def test_demo_sample_kernels_are_created_once():
    importers.tasks_import_suite()
    command = Command()

    first = command._sample_kernels()
    second = command._sample_kernels()

    assert first == second
    assert len(first) == sum(len(k.tracks) for k in DEMO_KERNELS)
    assert Kernel.objects.count() == len(DEMO_KERNELS)
    assert Evaluation.objects.filter(status="queued").count() == len(first)
    assert set(Submitter.objects.values_list("kind", flat=True)) == {"human", "model", "agent", "checkpoint"}
    assert ReviewCase.objects.count() == 0  # cases come from evaluations, not from seeding rows


def test_demo_creates_an_admin_and_a_reviewer_with_printed_passwords(client):
    out = io.StringIO()
    command = Command(stdout=out)

    first = command._users()
    second = command._users()
    command._print_welcome(host="127.0.0.1", port=8123, logins=second)
    printed = out.getvalue()

    users = {u.username: u for u in get_user_model().objects.filter(username__in=["admin", "reviewer"])}
    assert [name for name, _, _ in second] == ["admin", "reviewer"]
    assert (users["admin"].is_superuser, users["admin"].is_staff) == (True, True)
    assert users["reviewer"].has_perm("review.decide") and not users["reviewer"].is_staff
    assert [p for _, p, _ in first] != [p for _, p, _ in second]  # a new password every run
    for name, password, _ in second:
        assert client.login(username=name, password=password)
        assert name in printed and password in printed
    assert "http://127.0.0.1:8123/" in printed and "/review/" in printed


def test_demo_hack_kernels_land_in_the_review_queue_after_real_evaluations(client):
    # given: the demo's data, with only its review-flagged kernels evaluated (real CPU evaluations)
    importers.tasks_import_suite()
    command = Command(stdout=io.StringIO())
    logins = dict((name, password) for name, password, _ in command._users())
    command._sample_kernels()
    flagged_sources = {GELU_TF32, GELU_THREAD, MATMUL_FALLBACK, SILU_BF16}
    pending = Evaluation.objects.filter(kernel__source__in=flagged_sources).order_by("id")

    # when
    for evaluation in pending:
        services.evaluation_run(evaluation_id=evaluation.pk)
    client.login(username="reviewer", password=logins["reviewer"])
    queue = client.get("/review/").content.decode()

    # then: each is a real verdict with a review finding, and an open case in the queue
    cases = ReviewCase.objects.filter(status="open").select_related("kernel")
    assert sorted(c.kernel.source for c in cases) == sorted(flagged_sources)
    assert {e.status for e in Evaluation.objects.filter(kernel__source__in=flagged_sources)} == {
        "rejected",
        "passed",
    }
    assert queue.count("<tr data-case=") == 4
