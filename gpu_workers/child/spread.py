"""The spread that travels with every time and speedup: how many samples, their median, quartiles
and the median's distribution-free 95% interval; a speedup's interval from its two sides'.

A figure without its spread cannot be told from its neighbour: two kernels whose intervals overlap
are a tie, whatever their medians say."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def median_interval(values: Sequence[float]) -> tuple[float, float]:
    """The 95% interval of the median from the order statistics n/2 ± 0.98·√n (no assumption on
    the distribution); the whole range where there are too few values for it."""
    ordered = sorted(values)
    n = len(ordered)
    half = 0.98 * n ** 0.5
    lo, hi = max(0, int(n / 2 - half)), min(n - 1, int(n / 2 + half + 1))
    return ordered[lo], ordered[hi]


def summary(values: Sequence[float]) -> dict[str, Any]:
    """``{"samples", "median", "q1", "q3", "iqr_rel", "ci95"}`` of a series of times (ms)."""
    values = [float(v) for v in values]
    if not values:
        return {"samples": 0}
    median = statistics.median(values)
    if len(values) >= 4:
        q1, _, q3 = statistics.quantiles(values, n=4)
    else:
        q1, q3 = min(values), max(values)
    lo, hi = median_interval(values)
    return {"samples": len(values), "median": median, "q1": q1, "q3": q3,
            "iqr_rel": (q3 - q1) / median if median > 0 else None, "ci95": [lo, hi]}


def lower_median(values: Sequence[float]) -> float:
    """The median, or for an even count the lower of the two middle values: a baseline kept from
    separate evaluations is raised only when most of its samples are (a host busy for one timing
    inflates that one), and never lowered below a sample that was really measured."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def speedup_interval(baseline: dict[str, Any] | None, kernel: dict[str, Any] | None) -> list[float] | None:
    """The speedup's interval from the baseline's and the kernel's intervals (their ends crossed:
    the slowest baseline over the fastest kernel is its top)."""
    try:
        b_lo, b_hi = baseline["ci95"]
        k_lo, k_hi = kernel["ci95"]
    except (KeyError, TypeError, ValueError):
        return None
    if k_lo <= 0 or k_hi <= 0:
        return None
    return [b_lo / k_hi, b_hi / k_lo]


def run_to_run_factors(runs: dict[str, Any] | None) -> tuple[float, float] | None:
    """(fast, slow): how far the medians of three or more evaluations (``runs``: their summary) went
    from their middle either way, as factors (``fast`` at most 1, ``slow`` at least 1); None where
    there are fewer."""
    try:
        r_lo, r_hi = (float(v) for v in runs["ci95"])
        middle, count = float(runs["median"]), int(runs["samples"])
    except (KeyError, TypeError, ValueError):
        return None
    if count < 3 or middle <= 0 or r_lo <= 0:
        return None
    return min(r_lo / middle, 1.0), max(r_hi / middle, 1.0)


def widened(interval: dict[str, Any] | None, factors: tuple[float, float] | None) -> dict[str, Any] | None:
    """A median's interval holding a run-to-run spread as well: a median measured in a run that ran
    ``d`` times the usual speed lies within ``d`` of its usual value, ``d`` as far as ``factors``
    (fast, slow) go either way. Unchanged without factors."""
    try:
        lo, hi = (float(v) for v in interval["ci95"])
    except (KeyError, TypeError, ValueError):
        return interval
    if not factors:
        return interval
    fast, slow = factors
    return {**interval, "ci95": [lo / slow, hi / fast], "run_to_run": [fast, slow]}


def tie(a: list[float] | None, b: list[float] | None) -> bool:
    """Whether two speedups' intervals overlap (a ranking shows them as a tie)."""
    if not a or not b:
        return False
    return a[0] <= b[1] and b[0] <= a[1]
