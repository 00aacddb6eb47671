"""The JSON API on PostgreSQL: lists, details, leaderboard, submission with token auth, bad input."""

from __future__ import annotations

import json

import pytest

from webapp.arena.models import Evaluation, Kernel, Submitter

pytestmark = pytest.mark.django_db


def _post(client, url, body, token=None, **extra):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(url, data=json.dumps(body), content_type="application/json", **headers, **extra)


def test_openapi_schema_lists_the_endpoints(client):
    response = client.get("/api/openapi.json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    for path in ("/api/tasks", "/api/kernels", "/api/evaluations/{evaluation_id}", "/api/leaderboard"):
        assert path in paths


def test_docs_page_is_served(client):
    assert client.get("/api/docs").status_code == 200


def test_task_list_filters_and_caps_page_size(client, make_task, django_assert_max_num_queries):
    for i in range(3):
        make_task(name=f"l1_{i}", level=1)
    make_task(name="l2_0", level=2)

    with django_assert_max_num_queries(2):
        response = client.get("/api/tasks", {"level": 1, "page_size": 500})

    body = response.json()
    assert response.status_code == 200
    assert (body["count"], body["page"], body["page_size"]) == (3, 1, 100)
    assert [t["name"] for t in body["items"]] == ["l1_0", "l1_1", "l1_2"]


def test_task_list_pages(client, make_task):
    for i in range(5):
        make_task(name=f"t{i}")

    body = client.get("/api/tasks", {"page": 2, "page_size": 2}).json()

    assert [t["name"] for t in body["items"]] == ["t2", "t3"]
    assert body["count"] == 5


def test_unknown_ids_are_404(client):
    assert client.get("/api/tasks/999999").status_code == 404
    assert client.get("/api/kernels/999999").status_code == 404
    response = client.get("/api/evaluations/999999")
    assert response.status_code == 404
    assert response.json() == {"detail": "no evaluation 999999"}


def test_kernel_and_evaluation_lists_stay_within_query_budget(
    client, known_leaderboard, django_assert_max_num_queries
):
    with django_assert_max_num_queries(2):
        kernels = client.get("/api/kernels", {"page_size": 100})
    with django_assert_max_num_queries(2):
        evaluations = client.get("/api/evaluations", {"page_size": 100})

    assert kernels.json()["count"] == 12
    assert evaluations.json()["count"] == 12


def test_evaluation_list_filters(client, known_leaderboard):
    body = client.get("/api/evaluations", {"submitter": "beta", "status": "passed", "track": "strict"}).json()

    assert sorted(e["id"] for e in body["items"]) == sorted(
        [known_leaderboard["b_t2"].pk, known_leaderboard["b_other_hw"].pk]
    )


def test_evaluation_detail_carries_the_verdict(client, known_leaderboard):
    evaluation = known_leaderboard["a_t4_hack"]

    body = client.get(f"/api/evaluations/{evaluation.pk}").json()

    assert body["status"] == "rejected"
    assert body["findings"][0]["rule"] == "timer_mismatch"
    assert body["hardware"] == "cpu:test|torch-2.13.0|cuda-none"
    assert body["submitter"] == "alpha"


def test_kernel_detail_includes_source_and_evaluations(client, known_leaderboard):
    kernel = known_leaderboard["a_t1_first"].kernel

    body = client.get(f"/api/kernels/{kernel.pk}").json()

    assert body["source"] == kernel.source
    assert [e["id"] for e in body["evaluations"]] == [known_leaderboard["a_t1_first"].pk]


def test_leaderboard_endpoint_rows(client, known_leaderboard, django_assert_max_num_queries):
    with django_assert_max_num_queries(3):
        response = client.get("/api/leaderboard", {"track": "strict"})

    body = response.json()
    assert body["hardware"] == "cpu:test|torch-2.13.0|cuda-none"
    alpha = body["rows"][0]
    assert {
        k: alpha[k]
        for k in (
            "submitter",
            "track",
            "tasks_attempted",
            "pass_rate",
            "fast_1_eager",
            "fast_1_compile",
            "hacks_flagged",
        )
    } == {
        "submitter": "alpha",
        "track": "strict",
        "tasks_attempted": 4,
        "pass_rate": 0.75,
        "fast_1_eager": 0.5,
        "fast_1_compile": 0.25,
        "hacks_flagged": 1,
    }
    assert alpha["geomean_speedup_eager"] == pytest.approx(4 ** (1 / 3))
    assert set(alpha) >= {"suite", "level", "hardware", "geomean_speedup_compile"}


def test_leaderboard_unknown_hardware_is_404_and_bad_track_422(client, known_leaderboard):
    assert client.get("/api/leaderboard", {"hardware": "nope"}).status_code == 404
    assert client.get("/api/leaderboard", {"track": "bogus"}).status_code == 422


def test_submit_needs_a_token(new_kernel_source, client, make_task):
    task = make_task()

    missing = _post(
        client, "/api/kernels", {"task_id": task.pk, "submitter": "x", "source": new_kernel_source()}
    )
    invalid = _post(
        client,
        "/api/kernels",
        {"task_id": task.pk, "submitter": "x", "source": new_kernel_source()},
        token="ka_wrong",
    )

    assert (missing.status_code, invalid.status_code) == (401, 401)
    assert Kernel.objects.count() == 0


def test_submit_stores_kernel_and_queues_an_evaluation(new_kernel_source, client, make_task, api_token):
    task = make_task()
    source = new_kernel_source()

    response = _post(
        client,
        "/api/kernels",
        {"task_id": task.pk, "submitter": "gpt-x", "source": source, "track": "open"},
        token=api_token,
    )

    assert response.status_code == 202
    body = response.json()
    evaluation = Evaluation.objects.get(pk=body["evaluation_id"])
    assert (evaluation.status, evaluation.track, evaluation.kernel_id) == (
        "queued",
        "open",
        body["kernel_id"],
    )
    assert body["poll"] == f"/api/evaluations/{evaluation.pk}"
    assert Kernel.objects.get().metadata == {"submitted_by": "alice"}


def test_submitting_the_same_kernel_twice_returns_the_same_rows(
    new_kernel_source, client, make_task, api_token
):
    task = make_task()
    body = {"task": task.name, "suite": task.suite, "submitter": "gpt-x", "source": new_kernel_source()}

    first = _post(client, "/api/kernels", body, token=api_token).json()
    second = _post(client, "/api/kernels", body, token=api_token).json()

    assert first == second
    assert (Kernel.objects.count(), Evaluation.objects.count()) == (1, 1)


def test_oversized_upload_is_413_and_nothing_is_written(new_kernel_source, client, make_task, api_token):
    task = make_task()
    source = new_kernel_source() + "#" * (256 * 1024)

    response = _post(
        client, "/api/kernels", {"task_id": task.pk, "submitter": "big", "source": source}, token=api_token
    )

    assert response.status_code == 413
    assert "limit is 262144 bytes" in response.json()["detail"]
    assert (Kernel.objects.count(), Submitter.objects.count(), Evaluation.objects.count()) == (0, 0, 0)


def test_huge_request_body_is_413(client, make_task, api_token, new_kernel_source):
    task = make_task()
    source = new_kernel_source() + "#" * (3 * 1024 * 1024)

    response = _post(
        client, "/api/kernels", {"task_id": task.pk, "submitter": "big", "source": source}, token=api_token
    )

    assert response.status_code == 413
    assert response.json() == {"detail": "the request body is over 2621440 bytes"}
    assert Kernel.objects.count() == 0


def test_malformed_kernel_is_422_and_nothing_is_written(new_kernel_source, client, make_task, api_token):
    task = make_task()

    no_model = _post(
        client, "/api/kernels", {"task_id": task.pk, "submitter": "s", "source": "x = 1\n"}, token=api_token
    )
    not_python = _post(
        client,
        "/api/kernels",
        {"task_id": task.pk, "submitter": "s", "source": "class ModelNew(:"},
        token=api_token,
    )
    bad_track = _post(
        client,
        "/api/kernels",
        {"task_id": task.pk, "submitter": "s", "source": new_kernel_source(), "track": "sideways"},
        token=api_token,
    )
    not_json = client.post(
        "/api/kernels", data="{", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {api_token}"
    )

    assert no_model.status_code == 422
    assert no_model.json() == {"detail": "the kernel file does not define ModelNew"}
    assert not_python.status_code == 422
    assert "not valid Python" in not_python.json()["detail"]
    assert bad_track.status_code == 422
    assert not_json.status_code in (400, 422)
    assert (Kernel.objects.count(), Submitter.objects.count(), Evaluation.objects.count()) == (0, 0, 0)


def test_submit_to_unknown_task_is_404(new_kernel_source, client, api_token):
    response = _post(
        client,
        "/api/kernels",
        {"task_id": 424242, "submitter": "s", "source": new_kernel_source()},
        token=api_token,
    )

    assert response.status_code == 404
    assert response.json() == {"detail": "no task 424242"}
    assert Submitter.objects.count() == 0


def test_submitter_and_hardware_lists(client, known_leaderboard):
    submitters = client.get("/api/submitters", {"kind": "agent"}).json()
    hardware = client.get("/api/hardware").json()

    assert [s["name"] for s in submitters["items"]] == ["beta"]
    assert [h["key"] for h in hardware] == [
        "cpu:test|torch-2.13.0|cuda-none",
        "cuda:H200|torch-2.13.0|cuda-12.8",
    ]


def test_leaderboard_entries_behind_a_figure(client, known_leaderboard):
    fast = client.get("/api/leaderboard/entries", {"submitter": "alpha", "figure": "fast_1_eager"}).json()
    hacks = client.get("/api/leaderboard/entries", {"submitter": "alpha", "figure": "hacks"}).json()

    assert [(e["task"], e["evaluation_id"]) for e in fast] == [
        ("t1_relu", known_leaderboard["a_t1_first"].pk),
        ("t4_attn", known_leaderboard["a_t4"].pk),
    ]
    assert [(e["task"], e["hacked"]) for e in hacks] == [("t4_attn", True)]
    assert client.get("/api/leaderboard/entries", {"submitter": "nobody"}).status_code == 404
    assert client.get("/api/leaderboard/entries", {"submitter": "alpha", "figure": "x"}).status_code == 422
