"""Headless Chromium loads the leaderboard, a task page and a kernel page; a <script> in a kernel is inert."""

from __future__ import annotations

import pytest

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

XSS_SOURCE = """import torch
import torch.nn as nn

# </script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">
# <svg onload="window.__pwned = 3"></svg>


class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)
"""


def test_pages_render_in_chromium(live_server, browser_page, known_leaderboard, artifacts_dir):
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(f"{live_server.url}/?track=strict")
    page.wait_for_selector("#leaderboard tbody tr")
    page.wait_for_selector("#chart-scatter .main-svg", timeout=20_000)  # plotly.js drew the chart
    page.screenshot(path=str(artifacts_dir / "leaderboard.png"), full_page=True)
    first_row = page.locator("#leaderboard tbody tr").first.get_attribute("data-submitter")

    task = known_leaderboard["tasks"][0]
    page.goto(f"{live_server.url}/tasks/{task.pk}/")
    best_rows = page.locator("#best tbody tr").count()
    page.screenshot(path=str(artifacts_dir / "task.png"), full_page=True)

    kernel_id = known_leaderboard["a_t4_hack"].kernel_id
    page.goto(f"{live_server.url}/kernels/{kernel_id}/")
    findings = page.locator(".findings").inner_text()
    page.screenshot(path=str(artifacts_dir / "kernel.png"), full_page=True)

    assert first_row == "alpha"
    assert best_rows == 2
    assert "timer_mismatch" in findings
    assert errors == []


def test_script_in_kernel_source_is_inert(
    live_server, browser_page, make_kernel, make_submitter, artifacts_dir
):
    kernel = make_kernel(
        source=XSS_SOURCE, submitter=make_submitter(name="<script>window.__pwned=4</script>")
    )
    page = browser_page

    page.goto(f"{live_server.url}/kernels/{kernel.pk}/")
    page.wait_for_selector(".highlight")
    page.wait_for_timeout(300)
    page.screenshot(path=str(artifacts_dir / "kernel-xss.png"), full_page=True)

    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert "window.__pwned = 1" in page.locator(".highlight").inner_text()
    assert page.locator("main script").count() == 0
    assert page.locator("main img").count() == 0


def test_ranking_ties_and_charts_in_chromium(
    live_server, browser_page, make_submitter, make_kernel, make_evaluation, make_task, artifacts_dir
):
    # given: an honest submitter, two tied ones, a hacker and a PyTorch rewriter on strict
    tasks = [make_task(name=f"op{i}", level=1 + i % 2) for i in range(3)]
    subs = {n: make_submitter(name=n) for n in ("honest", "twin-a", "twin-b", "hacker", "rewriter")}
    speedups = {"honest": (1.6, 1.2, 0.9), "twin-a": (1.3, None, None), "twin-b": (1.3, None, None)}
    for name, values in speedups.items():
        for task, value in zip(tasks, values, strict=True):
            status = "passed" if value else "incorrect"
            make_evaluation(
                kernel=make_kernel(task=task, submitter=subs[name]),
                status=status,
                eager=value,
                compile=value and value * 0.8,
            )
    for task in tasks:
        make_evaluation(
            kernel=make_kernel(task=task, submitter=subs["hacker"]),
            status="rejected",
            eager=80.0,
            findings=[{"rule": "timer_mismatch", "severity": "reject", "message": "m", "family": 1}],
        )
        make_evaluation(
            kernel=make_kernel(task=task, submitter=subs["rewriter"]),
            status="rejected",
            eager=1.1,
            findings=[{"rule": "library_compute", "severity": "reject", "message": "aten::mm", "family": 14}],
        )
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # when
    page.goto(f"{live_server.url}/?track=strict")
    page.wait_for_selector("#chart-scatter .main-svg", timeout=20_000)
    page.screenshot(path=str(artifacts_dir / "leaderboard-ranking.png"), full_page=True)
    ranks = [
        (row.get_attribute("data-submitter"), row.get_attribute("data-rank"))
        for row in page.locator("#leaderboard tbody tr").all()
    ]
    help_text = page.locator("#leaderboard th").nth(4).get_attribute("title")
    rewriter_row = page.locator('#leaderboard tr[data-submitter="rewriter"]').inner_text()
    hacker_row = page.locator('#leaderboard tr[data-submitter="hacker"]').inner_text()
    drawn = {}
    for name, url in (
        ("task", f"/tasks/{tasks[0].pk}/"),
        ("kernel", f"/kernels/{subs['honest'].kernels.order_by('id').first().pk}/"),
        ("submitter", "/submitters/honest/"),
    ):
        page.goto(f"{live_server.url}{url}")
        page.wait_for_selector(f"#chart-{name} .main-svg", timeout=20_000)
        drawn[name] = page.locator(f"#chart-{name} .main-svg").count() > 0
        page.screenshot(path=str(artifacts_dir / f"{name}-chart.png"), full_page=True)

    # then: honest first; the twins share rank 2; hacker and rewriter tie last; no red badge for the rewriter
    assert ranks == [("honest", "1"), ("twin-a", "2"), ("twin-b", "2"), ("hacker", "4"), ("rewriter", "4")]
    assert "torch.compile" in help_text
    assert "⚑" not in rewriter_row and "⚑ 3" in hacker_row
    assert drawn == {"task": True, "kernel": True, "submitter": True}
    assert errors == []


def test_error_pages_are_styled_in_chromium(live_server, browser_page, artifacts_dir):
    page = browser_page

    response = page.goto(f"{live_server.url}/kernels/999999/")
    page.screenshot(path=str(artifacts_dir / "404.png"), full_page=True)

    assert response.status == 404
    assert page.locator(".error-page h1").inner_text() == "Nothing here"
    assert page.locator("header a.brand").count() == 1
