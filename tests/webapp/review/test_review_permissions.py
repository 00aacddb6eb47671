"""Who may do what: reviewers decide; anyone signed in may flag; anonymous users may do neither."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import PermissionDenied
from django.template.loader import render_to_string
from django.test import RequestFactory

from webapp.review import services
from webapp.review.models import Flag, ReviewCase, Verdict

pytestmark = pytest.mark.django_db


def _post_json(client, url, body, token=None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(url, data=json.dumps(body), content_type="application/json", **headers)


def test_anonymous_users_cannot_flag_or_review(client, make_kernel):
    kernel = make_kernel()
    case = services.case_ensure(kernel_id=kernel.pk)

    page_flag = client.post(f"/review/kernels/{kernel.pk}/flag/", {"reason": "odd"})
    api_flag = _post_json(client, "/api/review/flags", {"kernel_id": kernel.pk, "reason": "odd"})
    api_list = client.get("/api/review/flags")
    api_verdict = _post_json(client, "/api/review/verdicts", {"case_id": case.pk, "verdict": "hack"})
    queue = client.get("/review/")
    focus = client.get(f"/review/cases/{case.pk}/")

    assert page_flag.status_code == 302
    assert page_flag["Location"] == f"/accounts/login/?next=/kernels/{kernel.pk}/"
    assert (api_flag.status_code, api_list.status_code, api_verdict.status_code) == (401, 401, 401)
    assert queue.status_code == 302 and queue["Location"].startswith("/accounts/login/")
    assert focus.status_code == 302
    assert Flag.objects.count() == 0
    with pytest.raises(PermissionDenied):
        services.flag_create(kernel_id=kernel.pk, user=None, reason="odd")


def test_signed_in_users_flag_but_do_not_decide(client, make_kernel, member, token_of):
    kernel = make_kernel()
    token = token_of(member)
    client.force_login(member)

    page_flag = client.post(f"/review/kernels/{kernel.pk}/flag/", {"reason": "too fast to be true"})
    api_flag = _post_json(client, "/api/review/flags", {"kernel_id": kernel.pk, "reason": "again"}, token)
    case = ReviewCase.objects.get(kernel=kernel)
    api_verdict = _post_json(client, "/api/review/verdicts", {"case_id": case.pk, "verdict": "legit"}, token)
    page_verdict = client.post(f"/review/cases/{case.pk}/verdict/", {"verdict": "legit"})
    queue = client.get("/review/")
    rules = client.get("/api/review/rules", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert page_flag.status_code == 302 and page_flag["Location"] == f"/kernels/{kernel.pk}/"
    assert api_flag.status_code == 201
    assert api_flag.json()["created_by"] == "mona" and api_flag.json()["source"] == "user"
    assert list(Flag.objects.order_by("id").values_list("reason", "created_by__username")) == [
        ("too fast to be true", "mona"),
        ("again", "mona"),
    ]
    assert (api_verdict.status_code, page_verdict.status_code, queue.status_code) == (403, 403, 403)
    assert rules.status_code == 403
    assert Verdict.objects.count() == 0
    with pytest.raises(PermissionDenied):
        services.verdict_submit(case_id=case.pk, reviewer=member, verdict="hack")


def test_a_flag_needs_a_reason(client, make_kernel, member, token_of):
    kernel = make_kernel()

    response = _post_json(
        client, "/api/review/flags", {"kernel_id": kernel.pk, "reason": "  "}, token_of(member)
    )

    assert response.status_code == 422
    assert response.json() == {"detail": "say why this kernel looks wrong"}


def test_reviewers_decide_over_the_api(client, make_kernel, reviewers, token_of):
    rita, rob = reviewers
    kernel = make_kernel()
    case = services.case_ensure(kernel_id=kernel.pk)

    first = _post_json(
        client,
        "/api/review/verdicts",
        {"kernel_id": kernel.pk, "verdict": "hack", "family": "7", "evidence_lines": [2], "notes": "n"},
        token_of(rita),
    )
    second = _post_json(
        client, "/api/review/verdicts", {"case_id": case.pk, "verdict": "legit"}, token_of(rob)
    )
    bad = _post_json(client, "/api/review/verdicts", {"case_id": case.pk, "verdict": "maybe"}, token_of(rob))
    out_of_range = _post_json(
        client,
        "/api/review/verdicts",
        {"case_id": case.pk, "verdict": "hack", "evidence_lines": [99]},
        token_of(rob),
    )

    assert first.status_code == 201
    assert first.json() | {"id": 0} == {
        "id": 0,
        "case_id": case.pk,
        "kernel_id": kernel.pk,
        "reviewer": "rita",
        "verdict": "hack",
        "family": "7",
        "notes": "n",
        "evidence_lines": [2],
        "case_status": "open",
        "agreement": "1 of 1 agree (hack); 2 required",
    }
    assert second.status_code == 201
    assert (second.json()["case_status"], second.json()["agreement"]) == (
        "open",
        "1 of 2 agree (split); 2 required",
    )
    assert bad.json() == {"detail": "the verdict is hack, legit or unsure"}
    assert out_of_range.status_code == 422
    assert out_of_range.json()["detail"] == "evidence lines [99] are outside the source (1–11)"


def test_the_flag_include_offers_a_form_or_a_sign_in_link(make_kernel, member):
    from django.contrib.auth.models import AnonymousUser

    kernel = make_kernel()
    request = RequestFactory().get(f"/kernels/{kernel.pk}/")
    request.user = AnonymousUser()
    anonymous = render_to_string(
        "review/_flag_form.html", {"kernel": kernel, "user": request.user}, request=request
    )
    request.user = member
    signed_in = render_to_string(
        "review/_flag_form.html", {"kernel": kernel, "user": member}, request=request
    )

    assert f'href="/accounts/login/?next=/kernels/{kernel.pk}/"' in anonymous
    assert "<form" not in anonymous
    assert f'action="/review/kernels/{kernel.pk}/flag/"' in signed_in
    assert 'name="csrfmiddlewaretoken"' in signed_in


def test_the_kernel_page_carries_the_flag_form_and_the_review_status(client, make_kernel, member):
    kernel = make_kernel()
    services.flag_create(kernel_id=kernel.pk, user=member, reason="odd")
    client.force_login(member)

    page = client.get(f"/kernels/{kernel.pk}/").content.decode()

    assert f'action="/review/kernels/{kernel.pk}/flag/"' in page
    assert "This kernel is in the review queue." in page
