"""Database connections under ASGI: concurrent requests to daphne leave (almost) none open (integration).

Each request's sync code runs in a thread of its own under daphne; with persistent connections
(CONN_MAX_AGE > 0) every such thread kept one open after its request, until PostgreSQL ran out.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
from django.db import connection

from tests.webapp.live_asgi import live_asgi_server

pytestmark = [
    pytest.mark.integration,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

CONCURRENT_REQUESTS = 24
# what the server may keep between requests: the embedded worker's sweeper during one of its passes
IDLE_BOUND = 2


def _server_connections() -> int:
    """Backends on the test database other than this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_concurrent_asgi_requests_leave_at_most_a_few_database_connections(tmp_path, monkeypatch, make_task):
    for n in range(3):
        make_task(name=f"task_{n}")
    monkeypatch.setenv("DEBUG", "0")
    monkeypatch.delenv("CONN_MAX_AGE", raising=False)  # the team setup's default
    statuses: list[int] = []
    barrier = threading.Barrier(CONCURRENT_REQUESTS)

    # the team's settings module (not the test one), on the test database
    with live_asgi_server(tmp_path / "daphne.log", settings_module="webapp.settings.local") as base:

        def get() -> None:
            barrier.wait(timeout=60)  # all requests in flight together
            with urllib.request.urlopen(f"{base}/api/tasks?limit=50", timeout=120) as response:
                statuses.append(response.status)

        threads = [threading.Thread(target=get) for _ in range(CONCURRENT_REQUESTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=180)
        # a connection closes as its request ends, just after the response: poll, with a deadline
        deadline = time.monotonic() + 30
        while _server_connections() > IDLE_BOUND and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _server_connections()

    assert statuses == [200] * CONCURRENT_REQUESTS
    assert left <= IDLE_BOUND, left
