"""Review pages for people: the styled 403, the nav link only for reviewers, paginated queue and audit."""

from __future__ import annotations

import pytest

from webapp.review import services

pytestmark = pytest.mark.django_db


def test_a_member_gets_a_styled_403_and_no_review_link(client, member, reviewers):
    rita, _ = reviewers
    client.force_login(member)
    forbidden = client.get("/review/")
    home_member = client.get("/").content.decode()
    client.force_login(rita)
    home_reviewer = client.get("/").content.decode()

    html = forbidden.content.decode()
    assert forbidden.status_code == 403
    assert 'data-status="403"' in html and "mona" in html and "Reviewer" in html
    assert 'href="/review/"' not in home_member
    assert 'href="/review/"' in home_reviewer


def test_the_review_queue_pages_through_open_cases(
    client, reviewers, make_kernel, django_assert_max_num_queries
):
    rita, _ = reviewers
    for _ in range(53):
        services.case_ensure(kernel_id=make_kernel().pk)
    client.force_login(rita)

    with django_assert_max_num_queries(12):
        first = client.get("/review/").content.decode()
    second = client.get("/review/", {"page": 2}).content.decode()

    assert first.count("<tr data-case=") == 50 and "1–50 of 53" in first
    assert second.count("<tr data-case=") == 3 and "51–53 of 53" in second


def test_the_audit_log_pages_with_a_fixed_query_budget(
    client, reviewers, member, make_kernel, django_assert_max_num_queries
):
    rita, _ = reviewers
    kernel = make_kernel()
    for n in range(105):
        services.flag_create(kernel_id=kernel.pk, user=member, reason=f"look {n}")
    client.force_login(rita)

    with django_assert_max_num_queries(8):
        first = client.get("/review/audit/").content.decode()
    with django_assert_max_num_queries(8):
        last = client.get("/review/audit/", {"page": 2}).content.decode()

    assert first.count("<tr><td>") == 100 and 'rel="next"' in first
    assert last.count("<tr><td>") == 5 and "101–105 of 105" in last
