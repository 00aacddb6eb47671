"""A real Celery worker for integration tests, and the broker switch the test process needs.

Each test module uses a Redis database of its own (web 13, rollouts 12, training 11), so no other
worker ever sees its jobs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.webapp.requires import redis_required

ROOT = Path(__file__).resolve().parents[2]


def use_broker(app, url: str | None) -> None:
    """Point the test process's Celery app at another broker, fully: the app caches its connection
    and producer pools and kombu keeps global pools; a stale producer would publish to the previous
    test's broker, where no worker listens."""
    from kombu import pools

    if app._pool is not None:
        app._pool.force_close_all()
    pools.reset()
    app.conf.broker_url = url
    app._pool = None
    app.amqp._producer_pool = None


@contextmanager
def celery_worker(*, queue: str, redis_url: str, settings, log_path: Path, extra_env: dict | None = None,
                  redis_channel_layer: bool = False, pool: str = "solo",
                  beat: bool = False) -> Iterator[subprocess.Popen]:
    """``celery -A webapp worker -Q QUEUE`` on the test database and ``redis_url``; the test process
    enqueues through the same broker (and, if asked, listens through the Redis channel layer).
    ``pool="prefork"`` runs jobs in a child process (the one a worker-death test kills); ``beat=True``
    also runs Celery beat inside the worker (``-B``: the periodic sweeper)."""
    import redis
    from django.db import connection

    redis_required(redis_url)
    redis.Redis.from_url(redis_url).flushdb()
    db = connection.settings_dict
    env = {
        **{k: v for k, v in os.environ.items() if k != "JOB_BACKEND"},
        "DJANGO_SETTINGS_MODULE": "webapp.settings.local",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "REDIS_URL": redis_url,
        "DEBUG": "0",
        **(extra_env or {}),
    }
    log = log_path.open("w")
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "webapp", "worker", "-Q", queue, "-P", pool, "-c", "1",
         "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "info",
         *(["-B", "-s", str(log_path.with_suffix(".beat-schedule"))] if beat else [])],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    from channels.layers import channel_layers

    from webapp.celery import app

    old_broker = app.conf.broker_url
    use_broker(app, redis_url)
    settings.JOB_BACKEND = "celery"
    if redis_channel_layer:
        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [{"address": redis_url, "socket_timeout": 30}]},
            }
        }
    try:
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()
        use_broker(app, old_broker)
        channel_layers.backends.clear()


def wait_finished(evaluation, timeout_s: float, worker: subprocess.Popen | None = None):
    """Poll the row until it is finished, ``timeout_s`` has passed or (if given) the worker exited;
    returns it refreshed."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and (worker is None or worker.poll() is None):
        evaluation.refresh_from_db()
        if evaluation.is_finished:
            break
        time.sleep(0.5)
    evaluation.refresh_from_db()
    return evaluation
