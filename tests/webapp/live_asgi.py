"""daphne serving ``webapp.asgi`` on the test database in a subprocess (embedded jobs), for browser
tests that need websockets (Django's live server is WSGI only)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def live_asgi_server(log_path: Path, *, settings_module: str = "webapp.settings.test") -> Iterator[str]:
    """Yields the server's base URL once it accepts connections."""
    from django.db import connection

    db = connection.settings_dict
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "JOB_BACKEND")}
    env.update(
        DJANGO_SETTINGS_MODULE=settings_module,
        DATABASE_URL=f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        JOB_BACKEND="embedded",
        PYTHONPATH=str(ROOT),
    )
    log = open(log_path, "w")  # noqa: SIM115 - closed in finally
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
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
