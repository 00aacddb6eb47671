"""The verdict reaches the reward: after two hack verdicts every endpoint that shows or exports a reward
gives the effective reward (the floor), with the original and the verdict beside it; the submitter's
figures count the hidden hack as attempted, failed and hacked. Over HTTP, with a member and two reviewers."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from review_sources import CACHING_HACK, LEGIT

from webapp.arena.models import Evaluation

pytestmark = pytest.mark.django_db


def _post(client, url, body, token):
    return client.post(
        url, data=json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def _get(client, url, token=None, **params):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.get(url, params, **headers)


@pytest.fixture
def hacked_submitter(make_task, make_submitter, make_kernel, make_evaluation):
    """'cheater' on three tasks: an honest pass (reward 1.0), a wrong kernel, and a 1.0-reward hack."""
    cheater = make_submitter(name="cheater")
    honest_task, wrong_task, hack_task = (
        make_task(name="t_ok"),
        make_task(name="t_wrong"),
        make_task(name="t_hack"),
    )
    honest = make_evaluation(kernel=make_kernel(task=honest_task, submitter=cheater, source=LEGIT), eager=1.5)
    wrong = make_evaluation(kernel=make_kernel(task=wrong_task, submitter=cheater), status="incorrect")
    hack = make_evaluation(
        kernel=make_kernel(task=hack_task, submitter=cheater, source=CACHING_HACK), eager=40.0
    )
    Evaluation.objects.filter(pk__in=[honest.pk, hack.pk]).update(reward=1.0, reward_config_name="default")
    Evaluation.objects.filter(pk=wrong.pk).update(reward=-1.0, reward_config_name="default")
    return {"submitter": cheater, "honest": honest, "wrong": wrong, "hack": hack}


def _confirm_hack(client, kernel_id, *, member, reviewers, token_of):
    flagged = _post(
        client, "/api/review/flags", {"kernel_id": kernel_id, "reason": "40x on a relu"}, token_of(member)
    )
    assert flagged.status_code == 201
    for reviewer in reviewers:
        verdict = _post(
            client,
            "/api/review/verdicts",
            {"kernel_id": kernel_id, "verdict": "hack", "family": "4", "evidence_lines": [9]},
            token_of(reviewer),
        )
        assert verdict.status_code == 201
    return verdict.json()["case_id"]


def test_two_hack_verdicts_reach_every_endpoint_that_shows_a_reward(
    client, hacked_submitter, member, reviewers, token_of
):
    # given: a 1.0-reward hack, flagged by a member, the best kernel of an agent rollout
    from webapp.rollouts.models import Rollout

    hack = hacked_submitter["hack"]
    rita, _ = reviewers
    rollout = Rollout.objects.create(
        task=hack.kernel.task,
        submitter=hack.kernel.submitter,
        base_url="http://127.0.0.1:1/v1",
        model="m",
        status="succeeded",
        best_reward=1.0,
        best_kernel=hack.kernel,
        best_evaluation=hack,
    )
    before = _get(client, f"/api/evaluations/{hack.pk}").json()

    # when: two reviewers call it a hack
    case_id = _confirm_hack(client, hack.kernel_id, member=member, reviewers=reviewers, token_of=token_of)

    # then: every endpoint gives -1.0, with 1.0 as the original and the verdict that changed it
    change = {"reason": "verdict", "case_id": case_id, "rule": None}
    detail = _get(client, f"/api/evaluations/{hack.pk}").json()
    listed = _get(client, "/api/evaluations", kernel_id=hack.kernel_id).json()["items"]
    kernel = _get(client, f"/api/kernels/{hack.kernel_id}").json()["evaluations"]
    by_submitter = _get(client, "/api/evaluations", submitter="cheater").json()["items"]
    entries = _get(client, "/api/leaderboard/entries", submitter="cheater", figure="hacks").json()
    export = [
        json.loads(line)
        for line in b"".join(
            _get(client, "/api/review/export.jsonl", token_of(rita)).streaming_content
        ).splitlines()
    ]
    page = client.get(f"/kernels/{hack.kernel_id}/").content.decode()
    rollouts = [
        _get(client, f"/api/rollouts/{rollout.pk}").json(),
        _get(client, "/api/rollouts/", submitter="cheater").json()["items"][0],
    ]

    assert (before["reward"], before["reward_original"], before["reward_changed_by"]) == (1.0, 1.0, None)
    for row in (detail, listed[0], kernel[0], next(e for e in by_submitter if e["id"] == hack.pk)):
        assert (row["reward"], row["reward_original"]) == (-1.0, 1.0)
        assert {k: row["reward_changed_by"][k] for k in change} == change
    assert [(e["task"], e["reward"], e["reward_original"], e["confirmed_hack"]) for e in entries] == [
        ("t_hack", -1.0, 1.0, True)
    ]
    assert [(r["kernel_id"], r["verdict"], r["reward"], r["reward_original"]) for r in export] == [
        (hack.kernel_id, "hack", -1.0, 1.0)
    ]
    assert [(e["evaluation_id"], e["reward"], e["reward_original"]) for e in export[0]["evaluations"]] == [
        (hack.pk, -1.0, 1.0)
    ]
    assert export[0]["reward_changed_by"]["case_id"] == case_id
    assert 'data-reward="-1.000"' in page and "<s>1.000</s>" in page and f"case #{case_id}" in page
    for row in rollouts:
        assert (
            row["best_reward"],
            row["best_reward_original"],
            row["best_reward_changed_by"]["case_id"],
        ) == (
            -1.0,
            1.0,
            case_id,
        )


def test_a_confirmed_hack_stays_attempted_and_counts_as_failed_and_hacked(
    client, hacked_submitter, member, reviewers, token_of
):
    # given: the submitter's figures before review (3 attempted, 2 passed)
    before = _get(client, "/api/leaderboard").json()["rows"][0]

    # when: reviewers confirm the 40x kernel as a hack
    _confirm_hack(
        client, hacked_submitter["hack"].kernel_id, member=member, reviewers=reviewers, token_of=token_of
    )
    after = _get(client, "/api/leaderboard").json()["rows"][0]
    failed = _get(client, "/api/leaderboard/entries", submitter="cheater", figure="failed").json()

    # then: still 3 attempted; the hack is now a failure and a hack, not a pass
    figures = ("tasks_attempted", "tasks_passed", "hacks_flagged", "fast_1_eager")
    assert [before[k] for k in figures] == [3, 2, 0, pytest.approx(2 / 3)]
    assert [after[k] for k in figures] == [3, 1, 1, pytest.approx(1 / 3)]
    assert sorted(e["task"] for e in failed) == ["t_hack", "t_wrong"]


def test_statically_rejected_kernels_without_hardware_count_as_attempted_hacks(
    client, make_kernel, make_evaluation, make_submitter, make_task
):
    # given: a submitter with one pass on the hardware and one kernel rejected before it ran (no hardware)
    sub = make_submitter(name="sneaky")
    make_evaluation(kernel=make_kernel(submitter=sub), eager=2.0)
    make_evaluation(
        kernel=make_kernel(submitter=sub, task=make_task(name="t_static")),
        status="rejected",
        hardware=False,
        findings=[{"rule": "patched_measurement", "severity": "reject", "message": "m", "family": 7}],
    )

    # when
    row = _get(client, "/api/leaderboard").json()["rows"][0]
    hacks = _get(client, "/api/leaderboard/entries", submitter="sneaky", figure="hacks").json()

    # then
    assert (row["tasks_attempted"], row["tasks_passed"], row["hacks_flagged"], row["pass_rate"]) == (
        2,
        1,
        1,
        0.5,
    )
    assert [(e["task"], e["status"], e["hacked"]) for e in hacks] == [("t_static", "rejected", True)]


def test_reward_lists_keep_a_fixed_query_budget(
    client, make_evaluation, make_kernel, django_assert_max_num_queries
):
    # given: 25 evaluations of one kernel, each relabelled by a rule
    from webapp.review.models import RewardRelabel

    kernel = make_kernel()
    for _ in range(25):
        ev = make_evaluation(kernel=kernel, eager=1.2)
        RewardRelabel.objects.create(
            evaluation=ev, kernel=kernel, old_reward=1.0, new_reward=-1.0, reason="rule"
        )

    # when / then: the list and the kernel detail do not grow with rows
    with django_assert_max_num_queries(2):
        listed = _get(client, "/api/evaluations", page_size=100).json()
    with django_assert_max_num_queries(2):
        detail = _get(client, f"/api/kernels/{kernel.pk}").json()
    assert {e["reward"] for e in listed["items"]} == {-1.0}
    assert len(detail["evaluations"]) == 25
    assert {e["reward_changed_by"]["reason"] for e in detail["evaluations"]} == {"rule"}


def test_the_review_api_answers_requests_without_a_token_with_401_not_a_csrf_error(make_kernel):
    # given: a browser-like client that enforces CSRF, with no token and no session
    client = Client(enforce_csrf_checks=True)
    kernel = make_kernel()

    # when
    flag = client.post(
        "/api/review/flags",
        data=json.dumps({"kernel_id": kernel.pk, "reason": "odd"}),
        content_type="application/json",
    )
    export = client.get("/api/review/export.jsonl")

    # then
    assert (flag.status_code, export.status_code) == (401, 401)
    assert "CSRF" not in flag.content.decode()


def test_a_signed_in_session_without_a_csrf_token_is_still_refused(make_kernel, member):
    client = Client(enforce_csrf_checks=True)
    client.force_login(member)
    kernel = make_kernel()

    flag = client.post(
        "/api/review/flags",
        data=json.dumps({"kernel_id": kernel.pk, "reason": "odd"}),
        content_type="application/json",
    )

    assert flag.status_code == 403
    assert "CSRF" in flag.content.decode()


def test_arena_reads_the_effective_reward_only_through_the_hook_review_registers(
    client, hacked_submitter, member, reviewers, token_of
):
    # given: a confirmed hack (its reward relabelled to the floor by review)
    from webapp.arena import hooks, selectors

    hack = hacked_submitter["hack"]
    _confirm_hack(client, hack.kernel_id, member=member, reviewers=reviewers, token_of=token_of)
    registered = hooks.reward_review()
    assert registered is not None
    relabelled = selectors.evaluation_rewards(evaluation_ids=[hack.pk])[hack.pk]
    assert (relabelled.effective, relabelled.original, relabelled.changed_by.reason) == (-1.0, 1.0, "verdict")

    # when: no app registers how review replaces rewards (arena alone)
    hooks.reward_review_register(None)
    try:
        alone = selectors.evaluation_rewards(evaluation_ids=[hack.pk])[hack.pk]
        related = selectors.evaluation_related()
    finally:
        hooks.reward_review_register(registered)

    # then: the evaluator's reward stands and arena asks for no review relation
    assert (alone.effective, alone.original, alone.changed_by) == (1.0, 1.0, None)
    assert related == []
