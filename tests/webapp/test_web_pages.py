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
