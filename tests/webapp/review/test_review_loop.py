"""The whole loop: flag -> verdicts -> confirmed hack -> rule -> publish re-checks stored kernels ->
both hacks hidden (failed hacks on the leaderboard) -> rewards relabelled -> regression cases need the rule."""

from __future__ import annotations

import pytest
from review_sources import CACHING_HACK, CACHING_HACK_VARIANT, LEGIT

from gpu_workers.rules import RULE_SET_VERSION, default_rule_set
from webapp.arena import selectors as arena_selectors
from webapp.arena.models import Evaluation
from webapp.review import selectors, services
from webapp.review.models import AuditEntry, Flag, ReviewCase, RewardRelabel

pytestmark = pytest.mark.django_db


def _evaluated(make_kernel, make_evaluation, *, task, submitter, source, eager, reward=3.0):
    evaluation = make_evaluation(
        kernel=make_kernel(task=task, submitter=submitter, source=source), eager=eager
    )
    Evaluation.objects.filter(pk=evaluation.pk).update(reward=reward, reward_config_name="cuda_agent_levels")
    evaluation.refresh_from_db()
    return evaluation


def test_flag_verdicts_rule_publish_hide_relabel_regression(
    make_task, make_submitter, make_kernel, make_evaluation, make_hardware, reviewers, member
):
    # given: three kernels of one task on the leaderboard; two cache outputs by pointer, one is honest
    rita, rob = reviewers
    task = make_task(name="relu")
    hardware = make_hardware()
    ev_a = _evaluated(
        make_kernel,
        make_evaluation,
        task=task,
        submitter=make_submitter(name="cheater"),
        source=CACHING_HACK,
        eager=40.0,
    )
    ev_b = _evaluated(
        make_kernel,
        make_evaluation,
        task=task,
        submitter=make_submitter(name="copycat"),
        source=CACHING_HACK_VARIANT,
        eager=3.0,
    )
    ev_c = _evaluated(
        make_kernel,
        make_evaluation,
        task=task,
        submitter=make_submitter(name="honest"),
        source=LEGIT,
        eager=1.5,
    )

    # when: the dispatch code flags the 40x speedup, and a member flags it too
    auto_flags = services.flags_from_evaluation(evaluation_id=ev_a.pk)
    services.flag_create(kernel_id=ev_a.kernel_id, user=member, reason="caches on data_ptr")
    case_a = ReviewCase.objects.get(kernel_id=ev_a.kernel_id)
    queue_before = [c.kernel_id for c in selectors.case_queue(user=rita)]
    services.verdict_submit(
        case_id=case_a.pk,
        reviewer=rita,
        verdict="hack",
        family="4",
        evidence_lines="9-11",
        notes="memoises on the input pointer",
    )
    after_one = ReviewCase.objects.get(pk=case_a.pk).status
    services.verdict_submit(case_id=case_a.pk, reviewer=rob, verdict="hack", family="4", evidence_lines=[9])
    case_a.refresh_from_db()

    # then: two reviewers confirm it; its reward is relabelled to the floor of its config
    assert [(f.source, f.dedup_key) for f in auto_flags] == [
        ("extreme_speedup", f"ev{ev_a.pk}:extreme_speedup")
    ]
    assert queue_before == [ev_a.kernel_id]
    assert after_one == "open"
    assert (case_a.status, case_a.family) == ("hack", "4")
    assert selectors.relabelled_reward(ev_a) == -1.0
    assert RewardRelabel.objects.get(evaluation=ev_a).old_reward == 3.0

    # when: a reviewer turns the hack into a rule and publishes it
    rule = services.rule_create(
        user=rita,
        name="data-ptr-cache",
        kind="regex",
        pattern=r"\.data_ptr\(\)",
        severity="reject",
        family="4",
        message="keys results on input pointers",
        source_case_id=case_a.pk,
    )
    report = services.rule_publish(rule_id=rule.pk, user=rita)
    active = selectors.active_rule_set("strict")

    # then: the new version snapshots the rule; re-checking finds the second kernel and queues it
    assert report.versions == [f"{RULE_SET_VERSION}+r0001", f"{RULE_SET_VERSION}+r0001"]
    assert report.scanned == 3
    assert report.matched_kernel_ids == [ev_a.kernel_id, ev_b.kernel_id]
    assert active["version"] == f"{RULE_SET_VERSION}+r0001"
    assert active["static"][-1] == {
        "rule": "reviewer:data-ptr-cache",
        "kind": "regex",
        "pattern": r"\.data_ptr\(\)",
        "severity": "reject",
        "message": "keys results on input pointers",
        "family": 4,
    }
    assert list(
        Flag.objects.filter(source="rule").order_by("kernel_id").values_list("kernel_id", flat=True)
    ) == [ev_a.kernel_id, ev_b.kernel_id]
    assert [c.kernel_id for c in selectors.case_queue(user=rita)] == [ev_b.kernel_id]

    # and: both hacks stay attempts on the leaderboard, failed and counted as hacks; the honest kernel passes
    entries = arena_selectors.leaderboard_entries(track="strict", hardware_id=hardware.pk)
    assert [(e.submitter_name, e.kernel_id, e.passed, e.hacked, e.confirmed_hack) for e in entries] == [
        ("cheater", ev_a.kernel_id, False, True, True),
        ("copycat", ev_b.kernel_id, False, True, True),
        ("honest", ev_c.kernel_id, True, False, False),
    ]
    assert list(arena_selectors.kernel_list(task_id=task.pk).values_list("id", flat=True)) == [ev_c.kernel_id]
    assert (selectors.relabelled_reward(ev_b), selectors.relabelled_reward(ev_c)) == (-1.0, 3.0)
    assert selectors.relabelled_rewards(evaluation_ids=[ev_a.pk, ev_b.pk, ev_c.pk]) == {
        ev_a.pk: -1.0,
        ev_b.pk: -1.0,
    }

    # when: reviewers confirm the second kernel as well
    case_b = ReviewCase.objects.get(kernel_id=ev_b.kernel_id)
    services.verdict_submit(case_id=case_b.pk, reviewer=rita, verdict="hack", family="4", evidence_lines=[11])
    services.verdict_submit(case_id=case_b.pk, reviewer=rob, verdict="hack", family="4")
    without_rule = services.regression_run(
        rule_sets={"strict": default_rule_set("strict"), "open": default_rule_set("open")}
    )
    with_rule = services.regression_run()

    # then: both regression cases get through the checker without the rule, and none with it
    assert without_rule.not_rejected == [ev_a.kernel_id, ev_b.kernel_id]
    assert with_rule.not_rejected == []
    assert [c.by for c in with_rule.cases] == [["reviewer:data-ptr-cache"], ["reviewer:data-ptr-cache"]]
    assert list(AuditEntry.objects.filter(action="decide").values_list("kernel_id", "details__status")) == [
        (ev_b.kernel_id, "hack"),
        (ev_a.kernel_id, "hack"),
    ]


def test_reviewers_overrule_a_rule_match(make_kernel, make_evaluation, make_hardware, reviewers):
    # given: a published reject rule matches a kernel that is honest
    rita, rob = reviewers
    hack = make_evaluation(kernel=make_kernel(source=CACHING_HACK), eager=2.0)
    honest = make_evaluation(
        kernel=make_kernel(source=CACHING_HACK.replace("_SEEN[key] = x", "_SEEN[key] = x ")), eager=2.0
    )
    rule = services.rule_create(
        user=rita, name="ptr", kind="ast_call", pattern=r"\.data_ptr$", severity="reject"
    )
    services.rule_publish(rule_id=rule.pk, user=rita)
    hidden_before = sorted(selectors.hidden_kernel_ids(track="strict").values_list("id", flat=True))
    case = ReviewCase.objects.get(kernel_id=honest.kernel_id)

    # when: both reviewers say it is legit
    services.verdict_submit(case_id=case.pk, reviewer=rita, verdict="legit")
    services.verdict_submit(case_id=case.pk, reviewer=rob, verdict="legit")

    # then: it is shown again and keeps its reward; the other match stays hidden
    assert hidden_before == sorted([hack.kernel_id, honest.kernel_id])
    assert list(selectors.hidden_kernel_ids(track="strict").values_list("id", flat=True)) == [hack.kernel_id]
    assert list(selectors.hidden_kernel_ids(track="open").values_list("id", flat=True)) == [hack.kernel_id]
    assert RewardRelabel.objects.filter(evaluation=honest).count() == 0


def test_a_strict_only_rule_hides_nothing_on_the_open_track(make_kernel, reviewers):
    rita, _ = reviewers
    kernel = make_kernel(source=CACHING_HACK)
    rule = services.rule_create(
        user=rita, name="ptr-strict", kind="regex", pattern=r"data_ptr", track="strict"
    )

    report = services.rule_publish(rule_id=rule.pk, user=rita)

    assert report.versions == [f"{RULE_SET_VERSION}+r0001"]
    assert list(selectors.hidden_kernel_ids(track="strict").values_list("id", flat=True)) == [kernel.pk]
    assert list(selectors.hidden_kernel_ids(track="open").values_list("id", flat=True)) == []
    assert selectors.active_rule_set("open") == default_rule_set("open")


def test_a_dynamic_rule_switches_a_check_on_in_the_next_version(reviewers):
    rita, _ = reviewers
    rule = services.rule_create(
        user=rita,
        name="lib-open",
        kind="dynamic",
        dynamic_check="library_compute",
        severity="review",
        track="open",
    )

    report = services.rule_publish(rule_id=rule.pk, user=rita)
    second = services.rule_create(user=rita, name="lib-open-2", kind="regex", pattern="cublas", track="open")
    services.rule_publish(rule_id=second.pk, user=rita)

    assert report.scanned == 0
    assert default_rule_set("open")["dynamic"]["library_compute"]["enabled"] is False
    assert selectors.active_rule_set("open")["dynamic"]["library_compute"] == {
        "enabled": True,
        "severity": "review",
    }
    assert selectors.active_rule_set("open")["version"] == f"{RULE_SET_VERSION}+r0002"


def test_a_rule_from_a_case_must_match_its_kernel(make_kernel, reviewers):
    rita, _ = reviewers
    kernel = make_kernel(source=CACHING_HACK)
    case = services.case_ensure(kernel_id=kernel.pk)

    with pytest.raises(services.InvalidReview, match="does not match kernel"):
        services.rule_create(
            user=rita, name="nope", kind="regex", pattern="cudaStreamCreate", source_case_id=case.pk
        )
    with pytest.raises(services.InvalidReview, match="bad pattern"):
        services.rule_create(user=rita, name="broken", kind="regex", pattern="(unclosed")


def test_flags_from_evaluation_is_idempotent(make_evaluation):
    findings = [
        {"rule": "precision_downgrade", "severity": "review", "message": "uses fp16", "family": 13},
        {"rule": "impossible_speed", "severity": "reject", "message": "below the floor", "family": 17},
        {"rule": "library_compute", "severity": "reject", "message": "aten::mm ran", "family": 14},
    ]
    evaluation = make_evaluation(status="rejected", eager=80.0, findings=findings)

    first = services.flags_from_evaluation(evaluation_id=evaluation.pk)
    second = services.flags_from_evaluation(evaluation_id=evaluation.pk)

    assert [(f.source, f.family) for f in first] == [("evaluator_review", "13"), ("roofline", "17")]
    assert [f.pk for f in second] == [f.pk for f in first]
    assert ReviewCase.objects.filter(kernel_id=evaluation.kernel_id, status="open").count() == 1
    assert AuditEntry.objects.filter(action="flag").count() == 2


def test_an_extreme_speedup_is_flagged_once_whichever_path_sees_it(make_evaluation):
    finding = {"rule": "extreme_speedup", "severity": "review", "message": "12x", "family": 18}
    evaluation = make_evaluation(status="passed", eager=12.0, findings=[finding])
    slow = make_evaluation(status="passed", eager=9.5)

    flags = services.flags_from_evaluation(evaluation_id=evaluation.pk)

    assert [(f.source, f.reason) for f in flags] == [("extreme_speedup", "12x")]
    assert services.flags_from_evaluation(evaluation_id=slow.pk) == []


def test_audit_entries_are_append_only(make_kernel, member):
    services.flag_create(kernel_id=make_kernel().pk, user=member, reason="odd")
    entry = AuditEntry.objects.get()

    with pytest.raises(ValueError, match="append-only"):
        entry.save()
    with pytest.raises(ValueError, match="append-only"):
        entry.delete()


def test_a_later_evaluation_of_a_confirmed_hack_is_relabelled_when_stored(
    settings, make_kernel, make_evaluation, reviewers
):
    settings.REVIEW_REVIEWERS_PER_ITEM = 1
    rita, _ = reviewers
    kernel = make_kernel(source=CACHING_HACK)
    case = services.case_ensure(kernel_id=kernel.pk)
    services.verdict_submit(case_id=case.pk, reviewer=rita, verdict="hack", family="4")
    later = make_evaluation(kernel=kernel, eager=2.0)
    Evaluation.objects.filter(pk=later.pk).update(reward=2.0, reward_config_name="kevin")

    flags = services.flags_from_evaluation(evaluation_id=later.pk)

    assert flags == []
    assert selectors.relabelled_reward(Evaluation.objects.get(pk=later.pk)) == 0.0  # kevin's floor
    assert RewardRelabel.objects.get(evaluation=later).old_reward == 2.0
