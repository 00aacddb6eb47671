"""The review API: rules (create, publish, list), the active rule set, flag listing."""

from __future__ import annotations

import json

import pytest
from review_sources import CACHING_HACK, CACHING_HACK_VARIANT

from gpu_workers.rules import RULE_SET_VERSION
from webapp.review import services

pytestmark = pytest.mark.django_db


def _post(client, url, body, token):
    return client.post(
        url, data=json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def test_rules_are_created_published_and_listed_over_the_api(client, make_kernel, reviewers, token_of):
    rita, _ = reviewers
    token = token_of(rita)
    hack = make_kernel(source=CACHING_HACK)
    variant = make_kernel(source=CACHING_HACK_VARIANT)
    make_kernel()

    created = _post(
        client,
        "/api/review/rules",
        {
            "name": "ptr-call",
            "kind": "ast_call",
            "pattern": r"\.data_ptr$",
            "family": "4",
            "message": "calls data_ptr",
        },
        token,
    )
    rule_id = created.json()["id"]
    published = _post(client, f"/api/review/rules/{rule_id}/publish", {}, token)
    twice = _post(client, f"/api/review/rules/{rule_id}/publish", {}, token)
    missing = _post(client, "/api/review/rules/999999/publish", {}, token)
    listed = client.get("/api/review/rules", HTTP_AUTHORIZATION=f"Bearer {token}")
    rule_set = client.get("/api/review/rule-set/strict", HTTP_AUTHORIZATION=f"Bearer {token}")
    flags = client.get("/api/review/flags?source=rule&page_size=1", HTTP_AUTHORIZATION=f"Bearer {token}")

    assert created.status_code == 201
    assert (created.json()["status"], created.json()["track"], created.json()["severity"]) == (
        "draft",
        "both",
        "reject",
    )
    assert published.status_code == 200
    body = published.json()
    assert (body["versions"], body["scanned"], body["matched_kernel_ids"], len(body["new_flag_ids"])) == (
        [f"{RULE_SET_VERSION}+r0001", f"{RULE_SET_VERSION}+r0001"],
        3,
        [hack.pk, variant.pk],
        2,
    )
    assert body["relabelled"] == 0  # neither kernel has a finished evaluation
    assert twice.status_code == 422 and twice.json() == {"detail": "rule ptr-call is already published"}
    assert missing.status_code == 404
    assert [(r["name"], r["status"]) for r in listed.json()] == [("ptr-call", "published")]
    assert rule_set.json()["version"] == f"{RULE_SET_VERSION}+r0001"
    assert rule_set.json()["static"][-1]["rule"] == "reviewer:ptr-call"
    assert (flags.json()["count"], flags.json()["page_size"], len(flags.json()["items"])) == (2, 1, 1)


def test_bad_rules_are_refused_with_the_reason(client, reviewers, token_of):
    rita, _ = reviewers
    token = token_of(rita)
    services.rule_create(user=rita, name="taken", kind="regex", pattern="x")

    answers = [
        _post(client, "/api/review/rules", body, token).json()["detail"]
        for body in (
            {"name": "Bad Name", "kind": "regex", "pattern": "x"},
            {"name": "taken", "kind": "regex", "pattern": "x"},
            {"name": "nokind", "kind": "grep", "pattern": "x"},
            {"name": "dyn", "kind": "dynamic", "dynamic_check": "telepathy"},
            {"name": "empty", "kind": "regex", "pattern": ""},
        )
    ]

    assert answers[0] == "a rule name is 2–64 lowercase letters, digits, '-' or '_'"
    assert answers[1] == "a rule named 'taken' exists"
    assert answers[2] == "kind must be one of regex, ast_call, ast_attr, ast_import, dynamic"
    assert answers[3].startswith("unknown dynamic check 'telepathy'; known: ")
    assert answers[4] == "a static rule needs a pattern"


def test_the_review_endpoints_are_in_the_openapi_schema(client):
    paths = client.get("/api/openapi.json").json()["paths"]

    for path in (
        "/api/review/flags",
        "/api/review/verdicts",
        "/api/review/rules",
        "/api/review/rules/{rule_id}/publish",
        "/api/review/export.jsonl",
    ):
        assert path in paths
