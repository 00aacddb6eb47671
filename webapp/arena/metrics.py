"""Leaderboard metrics as the papers define them (DESIGN.md "Metrics"); pure functions, no Django.

One TaskOutcome per attempted task: the submitter's best evaluation of that task (highest speedup
vs eager among correct, non-rejected evaluations; ties go to the earliest evaluation). A kernel that
was rejected, or that review confirmed as a hack, is a failed task.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskOutcome:
    task_id: int
    passed: bool
    speedup_eager: float | None = None
    speedup_compile: float | None = None

    def speedup(self, baseline: str) -> float | None:
        return self.speedup_eager if baseline == "eager" else self.speedup_compile


def pass_rate(outcomes: Sequence[TaskOutcome]) -> float | None:
    if not outcomes:
        return None
    return sum(o.passed for o in outcomes) / len(outcomes)


def is_fast(outcome: TaskOutcome, *, p: float, baseline: str) -> bool:
    speedup = outcome.speedup(baseline)
    return outcome.passed and speedup is not None and speedup > p


def fast_p(outcomes: Sequence[TaskOutcome], *, p: float, baseline: str) -> float | None:
    """Share of attempted tasks whose kernel is correct and more than p× faster than the baseline."""
    if not outcomes:
        return None
    return sum(is_fast(o, p=p, baseline=baseline) for o in outcomes) / len(outcomes)


def geomean(values: Iterable[float]) -> float | None:
    logs = [math.log(v) for v in values if v is not None and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else None


def geomean_speedup_correct(outcomes: Sequence[TaskOutcome], *, baseline: str) -> float | None:
    """Geometric mean over correct kernels that have a measurement against the baseline."""
    return geomean(o.speedup(baseline) for o in outcomes if o.passed and o.speedup(baseline))


def geomean_speedup_all(outcomes: Sequence[TaskOutcome], *, baseline: str) -> float | None:
    """Geometric mean over attempted tasks, a failed task counted as 1× (it falls back to the baseline).

    None when no task passed: a submitter that failed everything has no speedup, not 1×.
    """
    if not any(o.passed for o in outcomes):
        return None
    return geomean((o.speedup(baseline) or 1.0) if o.passed else 1.0 for o in outcomes)
