"""Headless Chromium on a finished run's page: the Plotly curves render, and the step slider shows
that step's sampled trajectories, as text (the model's output is never parsed as HTML).

Served by daphne in a subprocess on the test database (the websocket needs an ASGI server)."""

from __future__ import annotations

import pytest

from tests.webapp.live_asgi import live_asgi_server
from webapp.training_runs import services

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

XSS = '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'


@pytest.fixture
def asgi_server(artifacts_dir):
    """daphne serving webapp.asgi on the test database; yields its base URL."""
    with live_asgi_server(artifacts_dir / "training-daphne.log") as url:
        yield url


@pytest.fixture
def finished_run(make_run):
    """Stored before the browser starts (Playwright's sync API runs an event loop in this thread)."""
    run = make_run(
        steps=4,
        status="succeeded",
        total_steps=4,
        text=lambda step, i: f"step {step} reply {i} {XSS if step == 2 else ''}".strip(),
    )
    services.training_checkpoint_store(run_id=run.pk, info={"step": 4, "stage": "grpo", "path": "/ck/4"})
    return run


def test_finished_run_page_draws_curves_and_the_slider_switches_samples(
    finished_run, browser_page, asgi_server, artifacts_dir
):
    run = finished_run
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(f"{asgi_server}/training/{run.pk}/")
    page.wait_for_selector("#chart-reward .main-svg", timeout=30_000)
    page.wait_for_function("document.getElementById('training-run').dataset.finished === '1'", timeout=30_000)
    page.wait_for_selector('#samples tbody tr[data-step="4"]', timeout=30_000)
    charts = page.locator("#charts .js-plotly-plot").count()
    reward_points = page.evaluate(
        "document.getElementById('chart-reward').data.map(t => t.y.filter(v => v !== null).length)"
    )
    latest = page.eval_on_selector_all("#samples tbody tr td pre", "ns => ns.map(n => n.textContent)")
    page.screenshot(path=str(artifacts_dir / "training-run-step4.png"), full_page=True)

    page.eval_on_selector("#step-slider", "s => { s.value = '2'; s.dispatchEvent(new Event('input')); }")
    page.wait_for_selector('#samples tbody tr[data-step="2"]', timeout=30_000)
    second = page.eval_on_selector_all("#samples tbody tr td pre", "ns => ns.map(n => n.textContent)")
    label = page.text_content("#step-label")
    checkpoint = page.get_attribute("#checkpoints a.checkpoint-submitter", "href")
    page.screenshot(path=str(artifacts_dir / "training-run-step2.png"), full_page=True)

    assert charts == 7
    assert reward_points == [4, 4, 4]  # reward mean, reward max, hack rate: one point per step
    assert latest == ["step 4 reply 0", "step 4 reply 1"]
    assert second == [f"step 2 reply 0 {XSS}", f"step 2 reply 1 {XSS}"]  # shown as text
    assert label == "2"
    assert checkpoint == f"/submitters/train{run.pk}-factory@step4/"
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("#samples img, #samples script").count() == 0
    assert errors == []
