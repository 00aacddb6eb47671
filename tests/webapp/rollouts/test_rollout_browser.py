"""Headless Chromium launches a rollout from the form and watches its events appear live.

The page is served by a real ASGI server (daphne, in a subprocess) on the test database, in the
embedded mode: no broker, the rollout runs on the server's background worker and the websocket
uses the in-memory channel layer. The model is a scripted OpenAI-compatible server on loopback.
"""

from __future__ import annotations

import pytest
from django.test import Client
from rollout_helpers import GOOD_KERNEL, kernel_reply, reply

from tests.webapp.live_asgi import live_asgi_server
from webapp.rollouts import services
from webapp.rollouts.models import Rollout, RolloutEvent

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

XSS = '<img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'


@pytest.fixture
def asgi_server(artifacts_dir):
    """daphne serving webapp.asgi on the test database; yields its base URL."""
    with live_asgi_server(artifacts_dir / "rollout-daphne.log") as url:
        yield url


def test_rollout_page_streams_events_while_the_rollout_runs(
    browser_page, asgi_server, relu_add_task, llm_server, django_user_model, artifacts_dir
):
    server = llm_server(
        [
            reply(f"Turn one: let me read the task. {XSS}", delay=1.5),
            reply("Turn two: still planning.", delay=1.5),
            reply(kernel_reply(GOOD_KERNEL, note="Turn three: a kernel."), delay=1.5),
        ]
    )
    services.llm_endpoint_register(name="scripted", base_url=server.url, model="scripted")
    user = django_user_model.objects.create_user(username="carol", password="x")
    client = Client()
    client.force_login(user)
    page = browser_page
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.context.add_cookies(
        [{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": asgi_server}]
    )

    page.goto(f"{asgi_server}/rollouts/new/")
    page.select_option("select[name=task]", str(relu_add_task.pk))
    page.fill("input[name=submitter]", "browser-agent")
    page.select_option("select[name=endpoint]", "scripted")
    page.fill("input[name=max_turns]", "3")
    page.select_option("select[name=track]", "open")
    page.select_option("select[name=device]", "cpu")
    page.click("#launch-form button[type=submit]")
    page.wait_for_url("**/rollouts/*/", timeout=30_000)
    page.wait_for_selector("#events li.kind-assistant", timeout=60_000)
    status_while_streaming = page.text_content("#rollout-status")
    shown_while_running = page.locator("#events li").count()
    page.screenshot(path=str(artifacts_dir / "rollout-live.png"), full_page=True)
    page.wait_for_selector("#events li.kind-summary", timeout=60_000)
    page.wait_for_function("document.getElementById('rollout').dataset.finished === '1'", timeout=30_000)
    seqs = [int(s) for s in page.eval_on_selector_all("#events li", "nodes => nodes.map(n => n.dataset.seq)")]
    final_status = page.text_content("#rollout-status")
    first_reply = page.text_content("#events li.kind-assistant pre")
    candidate_row = [page.text_content(f"#candidates tbody tr td:nth-child({i})") for i in (1, 2, 3)]
    best_link = page.get_attribute("#rollout-best", "href")
    page.screenshot(path=str(artifacts_dir / "rollout-finished.png"), full_page=True)

    rollout = Rollout.objects.get()
    stored = list(RolloutEvent.objects.filter(rollout=rollout).order_by("seq").values_list("seq", flat=True))
    assert status_while_streaming == "running"
    assert 3 <= shown_while_running < len(stored)  # events arrived before the rollout ended
    assert seqs == stored == list(range(len(stored)))  # every event once, in order
    assert (rollout.status, rollout.stop_reason, rollout.submitter.name) == (
        "succeeded",
        "success",
        "browser-agent",
    )
    assert candidate_row == ["3", "submit", "passed"]
    assert best_link == f"/kernels/{rollout.best_kernel_id}/"
    assert final_status == "succeeded"
    assert XSS in first_reply  # shown as text
    assert page.evaluate("typeof window.__pwned") == "undefined"
    assert page.locator("#events img, #events script").count() == 0
    assert errors == []
