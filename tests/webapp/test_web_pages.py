"""Server-rendered pages: content, escaping, 404s and query budgets."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

XSS_SOURCE = """import torch
import torch.nn as nn

# </script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)
"""


def test_leaderboard_page_shows_rows_links_and_charts(
    client, known_leaderboard, django_assert_max_num_queries
):
    with django_assert_max_num_queries(6):
        response = client.get("/", {"track": "strict"})

    html = response.content.decode()
    assert response.status_code == 200
    assert html.index('data-submitter="alpha"') < html.index('data-submitter="beta"')
    assert "75.0%" in html  # alpha's pass rate
    assert "/entries/?" in html and "figure=fast_1_eager" in html
    assert 'id="chart-scatter-data"' in html
    assert "/static/vendor/plotly.min.js" in html
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_leaderboard_page_query_count_does_not_grow_with_rows(
    client, make_evaluation, django_assert_max_num_queries
):
    for _ in range(30):
        make_evaluation(status="passed", eager=1.5, compile=0.9)

    with django_assert_max_num_queries(6):
        response = client.get("/")

    assert response.content.decode().count("data-submitter=") == 30


def test_leaderboard_page_without_data_explains_what_to_do(client):
    response = client.get("/")

    assert response.status_code == 200
    assert "manage.py demo" in response.content.decode()


def test_entries_page_lists_the_kernels_behind_a_figure(client, known_leaderboard):
    response = client.get("/entries/", {"submitter": "alpha", "figure": "fast_1_eager", "track": "strict"})

    html = response.content.decode()
    assert f"/kernels/{known_leaderboard['a_t1_first'].kernel_id}/" in html
    assert f"/kernels/{known_leaderboard['a_t4'].kernel_id}/" in html
    assert f"/kernels/{known_leaderboard['a_t2'].kernel_id}/" not in html


def test_task_page_shows_reference_and_best_kernel_per_submitter(
    client, known_leaderboard, django_assert_max_num_queries
):
    task = known_leaderboard["tasks"][0]

    with django_assert_max_num_queries(6):
        response = client.get(f"/tasks/{task.pk}/")

    html = response.content.decode()
    assert response.status_code == 200
    assert "get_init_inputs" in html
    assert f"/kernels/{known_leaderboard['a_t1_first'].kernel_id}/" in html
    assert f"/kernels/{known_leaderboard['a_t1_tie'].kernel_id}/" not in html
    assert "compile_error" in html  # beta's best on t1


def test_kernel_page_highlights_source_and_shows_findings(
    client, known_leaderboard, django_assert_max_num_queries
):
    evaluation = known_leaderboard["a_t4_hack"]
    # one query for the kernel, two for the page of its evaluations (count, items)

    with django_assert_max_num_queries(3):
        response = client.get(f"/kernels/{evaluation.kernel_id}/")

    html = response.content.decode()
    assert response.status_code == 200
    assert 'class="highlight"' in html
    assert "timer_mismatch" in html
    assert "data-evaluation-live" not in html


def test_kernel_page_refreshes_while_an_evaluation_runs(client, make_evaluation):
    evaluation = make_evaluation(status="running", hardware=None)

    html = client.get(f"/kernels/{evaluation.kernel_id}/").content.decode()

    assert f'data-evaluation-live="{evaluation.pk}"' in html
    assert "/static/arena/live.js" in html
    assert "This evaluation is running" in html


def test_kernel_page_of_a_queued_evaluation_without_timings(
    client, make_kernel, django_capture_on_commit_callbacks
):
    from webapp.arena import services

    kernel = make_kernel()
    with django_capture_on_commit_callbacks(execute=False):
        evaluation = services.evaluation_request(kernel_id=kernel.pk, track="strict")

    response = client.get(f"/kernels/{kernel.pk}/")

    assert response.status_code == 200
    assert f'data-evaluation-live="{evaluation.pk}"' in response.content.decode()


def test_kernel_page_escapes_kernel_source(client, make_kernel, make_submitter):
    kernel = make_kernel(source=XSS_SOURCE, submitter=make_submitter(name="<b>evil</b>"))

    html = client.get(f"/kernels/{kernel.pk}/").content.decode()

    assert "<script>window.__pwned" not in html
    assert "<img src=x" not in html
    assert "&lt;/script&gt;" in html
    assert "<b>evil</b>" not in html and "&lt;b&gt;evil&lt;/b&gt;" in html


def test_submitter_page(client, known_leaderboard, django_assert_max_num_queries):
    with django_assert_max_num_queries(8):
        response = client.get("/submitters/alpha/")

    html = response.content.decode()
    assert response.status_code == 200
    assert html.count("kernel ") >= 7
    assert "75.0%" in html


def test_task_list_page(client, known_leaderboard):
    response = client.get("/tasks/", {"level": 2})

    html = response.content.decode()
    assert "t3_mlp" in html and "t1_relu" not in html


def test_unknown_pages_are_404(client):
    assert client.get("/tasks/999999/").status_code == 404
    assert client.get("/kernels/999999/").status_code == 404
    assert client.get("/submitters/nobody/").status_code == 404
    assert client.get("/entries/", {"submitter": "nobody"}).status_code == 404


@pytest.mark.parametrize("model", ["task", "submitter", "kernel", "evaluation", "hardware"])
def test_admin_changelists_render(admin_client, known_leaderboard, model):
    response = admin_client.get(f"/admin/arena/{model}/")

    assert response.status_code == 200


def test_admin_token_changelist_renders(admin_client, api_token):
    assert admin_client.get("/admin/accounts/apitoken/").status_code == 200


def test_sign_in_page_and_link(client):
    login = client.get("/accounts/login/", {"next": "/kernels/1/"})
    home = client.get("/").content.decode()

    assert login.status_code == 200
    assert 'name="next" value="/kernels/1/"' in login.content.decode()
    assert 'href="/accounts/login/?next=/"' in home


def test_leaderboard_page_states_the_rank_order_labels_figures_and_shows_ties(
    client, make_submitter, make_kernel, make_evaluation, make_task
):
    task = make_task(name="tie_task")
    for name in ("b-twin", "a-twin"):
        make_evaluation(kernel=make_kernel(task=task, submitter=make_submitter(name=name)), eager=1.5)

    html = client.get("/").content.decode()

    assert "Rank order:" in html and "fast₁ vs torch.compile, then fast₁ vs eager, then pass rate" in html
    assert html.count('data-rank="1"') == 2  # a tie: equal rank numbers, listed by name
    assert html.index('data-submitter="a-twin"') < html.index('data-submitter="b-twin"')
    assert 'title="share of attempted tasks whose best kernel is correct and not a hack"' in html
    assert "Geomean vs eager (all; failed = 1×)" in html and 'id="legend"' in html


def test_an_honest_rewrite_rejected_on_strict_is_not_a_custom_kernel_not_a_hack(
    client, make_submitter, make_kernel, make_evaluation
):
    rewriter = make_submitter(name="rewriter")
    evaluation = make_evaluation(
        kernel=make_kernel(submitter=rewriter),
        status="rejected",
        findings=[{"rule": "library_compute", "severity": "reject", "message": "aten::mm ran", "family": 14}],
    )

    board = client.get("/").content.decode()
    entries = client.get("/entries/", {"submitter": "rewriter"}).content.decode()
    kernel = client.get(f"/kernels/{evaluation.kernel_id}/").content.decode()

    assert "⚑" not in board
    assert "not a custom kernel" in entries and "⚑ hack" not in entries
    assert 'data-kind="not_custom"' in kernel and 'class="hack"' not in kernel


def test_task_kernel_and_submitter_pages_draw_escaped_charts(
    client, make_submitter, make_kernel, make_evaluation, make_task
):
    task = make_task(name="<i>charted</i>")
    evil = make_submitter(name="<b>evil</b>")
    evaluation = make_evaluation(kernel=make_kernel(task=task, submitter=evil), eager=2.0, compile=1.2)

    pages = {
        "chart-task-data": client.get(f"/tasks/{task.pk}/").content.decode(),
        "chart-kernel-data": client.get(f"/kernels/{evaluation.kernel_id}/").content.decode(),
        "chart-submitter-data": client.get(f"/submitters/{evil.name}/").content.decode(),
    }

    for data_id, html in pages.items():
        assert f'id="{data_id}"' in html
        assert "/static/vendor/plotly.min.js" in html
        assert "<b>evil</b>" not in html and "<i>charted</i>" not in html


def test_submitter_and_kernel_pages_paginate_with_a_fixed_query_budget(
    client, make_submitter, make_kernel, make_evaluation, django_assert_max_num_queries
):
    sub = make_submitter(name="prolific")
    kernels = [make_kernel(submitter=sub) for _ in range(55)]
    for _ in range(23):
        make_evaluation(kernel=kernels[0], eager=1.1)

    with django_assert_max_num_queries(8):
        first = client.get("/submitters/prolific/").content.decode()
    second = client.get("/submitters/prolific/", {"page": 2}).content.decode()
    with django_assert_max_num_queries(3):
        evaluations = client.get(f"/kernels/{kernels[0].pk}/", {"page": 2}).content.decode()

    assert first.count('<tr><td><a href="/kernels/') == 50 and "1–50 of 55" in first and 'rel="next"' in first
    assert second.count('<tr><td><a href="/kernels/') == 5 and 'rel="prev"' in second
    assert evaluations.count('class="evaluation"') == 3 and "21–23 of 23" in evaluations


def test_styled_404_page_without_url_lists(client):
    response = client.get("/no/such/page/")

    html = response.content.decode()
    assert response.status_code == 404
    assert 'class="error-page"' in html and "Nothing here" in html
    assert "URLconf" not in html and "admin/" not in html.split('class="error-page"')[1]


def test_styled_500_page_renders_without_a_request():
    from django.template.loader import render_to_string

    html = render_to_string("500.html")

    assert 'data-status="500"' in html and "Something went wrong on our side" in html


def test_debug_is_off_unless_asked_for():
    import os
    import subprocess
    import sys

    def debug(env_value):
        env = {k: v for k, v in os.environ.items() if k != "DEBUG"}
        if env_value is not None:
            env["DEBUG"] = env_value
        code = "import webapp.settings.local as s; print(s.DEBUG)"
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout.strip()

    assert (debug(None), debug("0"), debug("1")) == ("False", "False", "True")
