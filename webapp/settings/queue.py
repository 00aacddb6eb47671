"""REDIS_URL -> Celery on Redis + channels-redis; no REDIS_URL -> the embedded worker + in-memory layer.

"embedded" means: no broker process; the same task functions run on a thread pool inside the web
process (webapp.core.jobs). Celery's ``task_always_eager`` is deliberately not used: it would run
an evaluation inside the request that asked for it.
"""

from __future__ import annotations

import os

from kombu import Queue

REDIS_URL = os.environ.get("REDIS_URL", "")

JOB_BACKEND = os.environ.get("JOB_BACKEND", "celery" if REDIS_URL else "embedded")
EMBEDDED_WORKERS = int(os.environ.get("EMBEDDED_WORKERS", "1"))

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None  # the job row is the truth, not Celery's result store
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = (Queue("default"), Queue("gpu"), Queue("agent"))
CELERY_TASK_ROUTES = {
    "webapp.arena.tasks.*": {"queue": "gpu"},
    "webapp.rollouts.tasks.*": {"queue": "agent"},
    "webapp.training_runs.tasks.*": {"queue": "gpu"},  # training needs the accelerator
}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 4 * 3600}
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]

if REDIS_URL:
    CHANNEL_LAYERS = {
        # channels-redis blocks 5 s on each receive; redis-py's own 5 s socket timeout would cut it
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
