"""Headless Chromium walks the review queue with the keyboard (h / l / u / n), clicking an evidence line."""

from __future__ import annotations

import pytest
from django.test import Client
from review_sources import CACHING_HACK, LEGIT

from webapp.review import services
from webapp.review.models import ReviewCase, Verdict

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]


def test_a_reviewer_walks_the_queue_with_the_keyboard(
    live_server, browser_page, make_kernel, make_submitter, reviewers, member, artifacts_dir
):
    # given: three flagged kernels; the third one carries a script in its source and its submitter's name
    rita, _ = reviewers
    first = make_kernel(source=LEGIT.replace("{n}", "1"))
    second = make_kernel(source=LEGIT.replace("{n}", "2"))
    third = make_kernel(
        source=CACHING_HACK.replace("_SEEN = {}", "_SEEN = {}  # </td><script>window.__pwned = 1</script>"),
        submitter=make_submitter(name="<img src=x onerror='window.__pwned = 2'>"),
    )
    for kernel in (first, second, third):
        services.flag_create(kernel_id=kernel.pk, user=member, reason="<b>look</b>")
    cases = {k.pk: ReviewCase.objects.get(kernel=k).pk for k in (first, second, third)}
    client = Client()
    client.force_login(rita)
    page = browser_page
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": live_server.url}]
    )
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # when: l on the first case, n past the second, evidence + notes + h on the third
    page.goto(f"{live_server.url}/review/next/")
    at_first = page.locator("#case-title").get_attribute("data-case")
    page.keyboard.press("l")
    page.wait_for_url(f"**/review/cases/{cases[second.pk]}/")
    page.keyboard.press("n")
    page.wait_for_url(f"**/review/cases/{cases[third.pk]}/")
    page.locator('#kernel-source td.ln[data-line="9"]').click()
    page.locator("#notes").fill("pointer-keyed cache")
    page.locator("#family").select_option("4")
    page.locator("#notes").press("Escape")
    evidence = page.locator("#evidence_lines").input_value()
    page.screenshot(path=str(artifacts_dir / "review-case.png"), full_page=True)
    pwned = page.evaluate("typeof window.__pwned")
    page.keyboard.press("h")
    page.wait_for_url(f"**/review/cases/{cases[second.pk]}/")  # wraps round to the skipped one
    agreement = page.locator("#agreement").inner_text()

    # then
    assert at_first == str(cases[first.pk])
    assert evidence == "9"
    assert pwned == "undefined"
    assert agreement == "0 of 2 reviewers"
    assert list(
        Verdict.objects.order_by("case_id").values_list(
            "case_id", "verdict", "family", "evidence_lines", "notes"
        )
    ) == [
        (cases[first.pk], "legit", "", [], ""),
        (cases[third.pk], "hack", "4", [9], "pointer-keyed cache"),
    ]
    assert errors == []
