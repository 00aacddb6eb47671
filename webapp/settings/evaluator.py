"""How the web app calls gpu_workers: device, baselines and the time limits of one evaluation."""

from __future__ import annotations

import os

EVAL_DEVICE = os.environ.get("EVAL_DEVICE", "cpu")
EVAL_BASELINES = tuple(b for b in os.environ.get("EVAL_BASELINES", "eager,compile").split(",") if b)
EVAL_TRIALS = int(os.environ.get("EVAL_TRIALS", "3"))
# GPUs a `gpu`-queue worker spreads CUDA evaluations over (each GPU measures one at a time; run the
# worker with --concurrency of a few per GPU so compiles overlap the measurements).
EVAL_GPUS = max(1, int(os.environ.get("EVAL_GPUS", "1")))
# Where a `gpu`-queue job runs its evaluation: "local" (in the worker process, on EVAL_GPUS) or "ray"
# (handed to the cluster's named evaluator actors, one per GPU, at RAY_ADDRESS; see gpu_workers.workers.pool).
EVAL_POOL = os.environ.get("EVAL_POOL", "local")
if EVAL_POOL not in ("local", "ray"):
    raise ValueError(f"EVAL_POOL must be 'local' or 'ray', not {EVAL_POOL!r}")
# Celery time limits of one evaluation task (a C++ build alone can take a minute on a laptop).
EVAL_SOFT_TIME_LIMIT_S = int(os.environ.get("EVAL_SOFT_TIME_LIMIT_S", "1800"))
EVAL_TIME_LIMIT_S = int(os.environ.get("EVAL_TIME_LIMIT_S", "1900"))
# Size caps of what the API accepts.
KERNEL_SOURCE_MAX_BYTES = 256 * 1024
IMPORT_FILE_MAX_BYTES = 64 * 1024 * 1024
