"""Per-user rate limits and queue caps (staff are exempt); 0 turns a limit off. Each is checked
against rows in the database, so every web process and worker sees the same counts."""

from __future__ import annotations

import os


def _int(name: str, default: int) -> int:
    return max(0, int(os.environ.get(name, str(default))))


# Kernel submissions (API posts and kernel-file imports) per user per minute.
LIMIT_SUBMISSIONS_PER_MINUTE = _int("LIMIT_SUBMISSIONS_PER_MINUTE", 30)
# Evaluations a user may have queued or running at once.
LIMIT_QUEUED_EVALUATIONS = _int("LIMIT_QUEUED_EVALUATIONS", 100)
# Rollout launches (one task or a suite) per user per minute, and rollouts queued or running at once.
LIMIT_ROLLOUT_LAUNCHES_PER_MINUTE = _int("LIMIT_ROLLOUT_LAUNCHES_PER_MINUTE", 10)
LIMIT_QUEUED_ROLLOUTS = _int("LIMIT_QUEUED_ROLLOUTS", 300)
# Training launches per user per minute, and training runs queued or running at once.
LIMIT_TRAINING_LAUNCHES_PER_MINUTE = _int("LIMIT_TRAINING_LAUNCHES_PER_MINUTE", 5)
LIMIT_QUEUED_TRAINING_RUNS = _int("LIMIT_QUEUED_TRAINING_RUNS", 2)
