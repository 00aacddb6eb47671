"""Headless Chromium on a finished run's page: the Plotly curves render, and the step slider shows
that step's sampled trajectories, as text (the model's output is never parsed as HTML).

Served by daphne in a subprocess on the test database (the websocket needs an ASGI server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.db import connection

from webapp.training_runs import services

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

ROOT = Path(__file__).resolve().parents[3]
XSS = '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def asgi_server(artifacts_dir):
    db = connection.settings_dict
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "JOB_BACKEND")}
    env.update(
        DJANGO_SETTINGS_MODULE="webapp.settings.test",
        DATABASE_URL=f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        JOB_BACKEND="embedded",
        PYTHONPATH=str(ROOT),
    )
    log_path = artifacts_dir / "training-daphne.log"
    log = open(log_path, "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            assert process.poll() is None, log_path.read_text()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "daphne did not start"
                time.sleep(0.3)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


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
