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
    assert "library_compute" in findings
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
