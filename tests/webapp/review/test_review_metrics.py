"""Agreement and the checker's precision/recall against hand-computed values; export; query budgets."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from review_sources import CACHING_HACK, LEGIT, LEGIT_WITH_POINTER, PATCHED_TIMER_HACK

from gpu_workers.rules import RULE_SET_VERSION
from webapp.review import selectors, services
from webapp.review.models import ReviewCase

pytestmark = pytest.mark.django_db


def _case(make_kernel, source=None):
    kernel = make_kernel(source=source) if source else make_kernel()
    return services.case_ensure(kernel_id=kernel.pk)


def test_agreement_per_case_and_fleiss_kappa(settings, make_kernel, make_user):
    # given: five required reviewers, so no case closes; verdicts picked by hand
    settings.REVIEW_REVIEWERS_PER_ITEM = 5
    users = [make_user(f"r{i}", reviewer=True) for i in range(3)]
    ballots = [("hack", "hack"), ("hack", "legit"), ("legit", "legit", "unsure"), ("unsure",)]
    cases = [_case(make_kernel) for _ in ballots]
    for case, ballot in zip(cases, ballots):
        for user, verdict in zip(users, ballot):
            services.verdict_submit(case_id=case.pk, reviewer=user, verdict=verdict)

    # when
    labels = [selectors.case_agreement(selectors.case_focus(case_id=c.pk)).label for c in cases]
    summary = selectors.agreement_summary()

    # then: P_i = 1, 0, 1/3 (the single-verdict case is left out); P-bar = 4/9;
    # p = (3/7, 3/7, 1/7), P_e = 19/49; kappa = (4/9 - 19/49) / (1 - 19/49) = 5/54
    assert labels == [
        "2 of 2 agree (hack); 5 required",
        "1 of 2 agree (split); 5 required",
        "2 of 3 agree (legit); 5 required",
        "1 of 1 agree (unsure); 5 required",
    ]
    assert summary.items == 3
    assert Fraction(summary.observed).limit_denominator(1000) == Fraction(4, 9)
    assert Fraction(summary.expected).limit_denominator(1000) == Fraction(19, 49)
    assert Fraction(summary.kappa).limit_denominator(1000) == Fraction(5, 54)
    assert ReviewCase.objects.filter(status="open").count() == 4


def test_a_strict_majority_of_three_decides(settings, make_kernel, make_user):
    settings.REVIEW_REVIEWERS_PER_ITEM = 3
    a, b, c = (make_user(n, reviewer=True) for n in "abc")
    case = _case(make_kernel)

    services.verdict_submit(case_id=case.pk, reviewer=a, verdict="hack", family="2")
    services.verdict_submit(case_id=case.pk, reviewer=b, verdict="unsure")
    services.verdict_submit(case_id=case.pk, reviewer=b, verdict="hack", family="5")  # b changes their mind
    case.refresh_from_db()
    with pytest.raises(services.InvalidReview, match="already decided"):
        services.verdict_submit(case_id=case.pk, reviewer=c, verdict="legit")

    assert (case.status, case.family) == ("hack", "2")  # tie between families: the lower number
    assert case.verdicts.count() == 2


def test_precision_and_recall_per_version_and_family(settings, make_kernel, make_evaluation, make_user):
    # given: one reviewer decides each case; five reviewed kernels
    settings.REVIEW_REVIEWERS_PER_ITEM = 1
    rita = make_user("rita", reviewer=True)
    k1 = _case(make_kernel, PATCHED_TIMER_HACK)  # hack, family 7: a built-in static rule rejects it
    k2 = _case(make_kernel, CACHING_HACK)  # hack, family 4: nothing built in catches it
    k3 = _case(make_kernel, LEGIT)  # legit, nothing fires
    k4 = _case(make_kernel)  # legit, but its evaluation under the built-in version was rejected
    k5 = _case(make_kernel, LEGIT_WITH_POINTER)  # legit, the reviewer rule below matches it
    make_evaluation(
        kernel=k4.kernel,
        status="rejected",
        findings=[{"rule": "library_compute", "severity": "reject", "message": "m", "family": 14}],
    )
    from webapp.arena.models import Evaluation

    Evaluation.objects.filter(kernel=k4.kernel).update(
        rule_set_version=RULE_SET_VERSION, rule_set_name="strict"
    )
    for case, verdict, family in [
        (k1, "hack", "7"),
        (k2, "hack", "4"),
        (k3, "legit", ""),
        (k4, "legit", ""),
        (k5, "legit", ""),
    ]:
        services.verdict_submit(case_id=case.pk, reviewer=rita, verdict=verdict, family=family)
    rule = services.rule_create(
        user=rita, name="ptr", kind="regex", pattern=r"data_ptr\(\)", family="4", source_case_id=k2.pk
    )
    services.rule_publish(rule_id=rule.pk, user=rita)

    # when
    base, published = selectors.checker_metrics(track="strict")

    # then: built-in: TP k1, FN k2, FP k4, TN k3 k5 -> precision 1/2, recall 1/2
    assert (base.version, base.tp, base.fp, base.fn, base.tn) == (RULE_SET_VERSION, 1, 1, 1, 2)
    assert (base.precision, base.recall) == (0.5, 0.5)
    assert [
        (f.family, f.hacks, f.caught, f.recall, f.fired, f.fired_hacks, f.precision) for f in base.families
    ] == [
        ("4", 1, 0, 0.0, 0, 0, None),
        ("7", 1, 1, 1.0, 1, 1, 1.0),
        ("14", 0, 0, None, 1, 0, 0.0),
    ]
    # with the rule: TP k1 k2, FP k5, TN k3 k4 (k4's rejection was under the older version)
    assert (published.version, published.tp, published.fp, published.fn, published.tn) == (
        f"{RULE_SET_VERSION}+r0001",
        2,
        1,
        0,
        2,
    )
    assert (published.precision, published.recall) == (pytest.approx(2 / 3), 1.0)
    assert [
        (f.family, f.hacks, f.caught, f.fired, f.fired_hacks, f.precision) for f in published.families
    ] == [
        ("4", 1, 1, 2, 1, 0.5),
        ("7", 1, 1, 1, 1, 1.0),
    ]


def test_export_streams_reviewed_kernels_as_jsonl(client, settings, make_kernel, reviewers, token_of):
    settings.REVIEW_REVIEWERS_PER_ITEM = 2
    rita, rob = reviewers
    decided = _case(make_kernel, CACHING_HACK)
    _case(make_kernel)  # never reviewed: not exported
    services.verdict_submit(
        case_id=decided.pk,
        reviewer=rita,
        verdict="hack",
        family="4",
        evidence_lines="9, 10",
        notes="pointer cache",
    )
    services.verdict_submit(case_id=decided.pk, reviewer=rob, verdict="hack", family="4", evidence_lines=[11])

    response = client.get("/api/review/export.jsonl", HTTP_AUTHORIZATION=f"Bearer {token_of(rita)}")
    lines = b"".join(response.streaming_content).decode().splitlines()
    row = json.loads(lines[0])

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert len(lines) == 1
    assert {k: row[k] for k in ("kernel_id", "source", "verdict", "family", "evidence_lines", "notes")} == {
        "kernel_id": decided.kernel_id,
        "source": CACHING_HACK,
        "verdict": "hack",
        "family": "4",
        "evidence_lines": [9, 10, 11],
        "notes": ["pointer cache"],
    }
    assert row["task"] == decided.kernel.task.name
    assert [(r["reviewer"], r["evidence_lines"]) for r in row["reviews"]] == [
        ("rita", [9, 10]),
        ("rob", [11]),
    ]


def test_queue_page_and_flag_list_have_a_fixed_query_budget(client, make_kernel, reviewers, member, token_of):
    rita, rob = reviewers
    token = token_of(member)

    def counts() -> tuple[int, int, int]:
        client.force_login(rita)
        with CaptureQueriesContext(connection) as queue:
            assert client.get("/review/").status_code == 200
        case = ReviewCase.objects.order_by("id").first()
        with CaptureQueriesContext(connection) as focus:
            assert client.get(f"/review/cases/{case.pk}/").status_code == 200
        with CaptureQueriesContext(connection) as flags:
            assert client.get("/api/review/flags", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 200
        return len(queue), len(focus), len(flags)

    def grow(n: int) -> None:
        for _ in range(n):
            kernel = make_kernel()
            services.flag_create(kernel_id=kernel.pk, user=member, reason="odd")
            case = ReviewCase.objects.get(kernel=kernel)
            services.verdict_submit(case_id=case.pk, reviewer=rob, verdict="unsure")

    grow(2)
    small = counts()
    grow(6)
    large = counts()

    assert small == large


def test_pages_escape_what_a_kernel_wrote(client, make_kernel, make_submitter, reviewers, member):
    rita, _ = reviewers
    kernel = make_kernel(
        source=LEGIT.replace("# legit {n}", "# </td><script>alert(1)</script>"),
        submitter=make_submitter(name="<img src=x onerror=alert(2)>"),
    )
    services.flag_create(kernel_id=kernel.pk, user=member, reason="<script>alert(3)</script>")
    case = ReviewCase.objects.get(kernel=kernel)
    client.force_login(rita)

    page = client.get(f"/review/cases/{case.pk}/").content.decode()
    queue = client.get("/review/").content.decode()

    assert "<script>alert" not in page and "<script>alert" not in queue
    assert "&lt;/td&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;script&gt;alert(3)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(2)&gt;" in queue


def test_review_pages_render_for_a_reviewer(client, make_kernel, reviewers):
    rita, rob = reviewers
    case = _case(make_kernel, CACHING_HACK)
    services.verdict_submit(case_id=case.pk, reviewer=rita, verdict="hack", family="4", evidence_lines=[9])
    services.verdict_submit(case_id=case.pk, reviewer=rob, verdict="hack", family="4")
    client.force_login(rita)

    rule_form = client.get(f"/review/cases/{case.pk}/rule/")
    created = client.post(
        f"/review/cases/{case.pk}/rule/",
        {
            "name": "ptr",
            "kind": "regex",
            "pattern": r"x\.data_ptr\(\)",
            "severity": "reject",
            "track": "both",
            "family": "4",
            "message": "pointer cache",
            "dynamic_check": "",
        },
    )
    rule = services.ReviewerRule.objects.get(name="ptr")
    published = client.post(f"/review/rules/{rule.pk}/publish/")
    pages = {
        url: client.get(url).status_code
        for url in ("/review/rules/", "/review/checker/", "/review/audit/", f"/review/cases/{case.pk}/")
    }

    assert rule_form.status_code == 200
    assert 'value="key = \\(x\\.data_ptr\\(\\), tuple\\(x\\.shape\\)\\)"' in rule_form.content.decode()
    assert created.status_code == 302 and published.status_code == 302
    assert pages == {
        "/review/rules/": 200,
        "/review/checker/": 200,
        "/review/audit/": 200,
        f"/review/cases/{case.pk}/": 200,
    }
    assert services.regression_run().not_rejected == []


def test_the_focus_view_links_the_trajectory_of_a_rollout_kernel(client, make_kernel, reviewers):
    rita, _ = reviewers
    kernel = make_kernel(origin="rollout")
    kernel.metadata = {"rollout_id": 42, "turn": 3}
    kernel.save(update_fields=["metadata"])
    uploaded = make_kernel()
    case = services.case_ensure(kernel_id=kernel.pk)
    client.force_login(rita)

    page = client.get(f"/review/cases/{case.pk}/").content.decode()

    assert selectors.trajectory_url(kernel) == "/rollouts/42/"
    assert selectors.trajectory_url(uploaded) is None
    assert '<a href="/rollouts/42/" id="trajectory">trajectory</a>' in page
