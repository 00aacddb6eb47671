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

# The job runner (webapp.core.runner): a running job stamps its row every JOB_HEARTBEAT_S; a row whose
# heartbeat is older than JOB_STALE_AFTER_S has lost its worker and the sweeper, every JOB_SWEEP_S,
# puts it back in the queue (so within JOB_STALE_AFTER_S + JOB_SWEEP_S, under a minute); a row is
# claimed at most JOB_MAX_ATTEMPTS times, then fails as an infrastructure error.
JOB_HEARTBEAT_S = float(os.environ.get("JOB_HEARTBEAT_S", "10"))
JOB_STALE_AFTER_S = float(os.environ.get("JOB_STALE_AFTER_S", "40"))
JOB_SWEEP_S = float(os.environ.get("JOB_SWEEP_S", "15"))
JOB_MAX_ATTEMPTS = int(os.environ.get("JOB_MAX_ATTEMPTS", "3"))
if not 0 < JOB_HEARTBEAT_S < JOB_STALE_AFTER_S:
    raise ValueError("JOB_HEARTBEAT_S must be positive and below JOB_STALE_AFTER_S")
if JOB_MAX_ATTEMPTS < 1:
    raise ValueError("JOB_MAX_ATTEMPTS must be at least 1")

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_RESULT_BACKEND = None  # the job row is the truth, not Celery's result store
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_QUEUES = (Queue("default"), Queue("gpu"), Queue("agent"))
CELERY_TASK_ROUTES = {
    "webapp.core.tasks.*": {"queue": "default"},
    "webapp.arena.tasks.*": {"queue": "gpu"},
    "webapp.rollouts.tasks.*": {"queue": "agent"},
    "webapp.training_runs.tasks.*": {"queue": "gpu"},  # training needs the accelerator
}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 4 * 3600}
# `celery -A webapp beat` (docker-compose's `beat`) sends the sweeper; a pass missed is not worth
# catching up, hence the expiry.
CELERY_BEAT_SCHEDULE = {
    "jobs-sweep": {
        "task": "webapp.core.tasks.jobs_sweep_task",
        "schedule": JOB_SWEEP_S,
        "options": {"expires": JOB_SWEEP_S},
    }
}
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
