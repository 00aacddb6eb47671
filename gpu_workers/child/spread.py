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


def with_run_to_run(kernel: dict[str, Any] | None, runs: dict[str, Any] | None) -> dict[str, Any] | None:
    """The kernel's interval widened by the run-to-run spread of a baseline kept from three or more
    evaluations (``runs``: the summary of their medians): a kernel timed once is one draw of that
    spread, which the interval of its own samples does not hold. Its median measured in a run that
    ran ``d`` times the usual speed's lies within ``d`` of its usual value, ``d`` as far as the
    baseline's runs went either way. Unchanged where there is no such spread."""
    try:
        k_lo, k_hi = (float(v) for v in kernel["ci95"])
        r_lo, r_hi = (float(v) for v in runs["ci95"])
        middle, count = float(runs["median"]), int(runs["samples"])
    except (KeyError, TypeError, ValueError):
        return kernel
    if count < 3 or middle <= 0 or r_lo <= 0:
        return kernel
    slow, fast = max(r_hi / middle, 1.0), min(r_lo / middle, 1.0)
    return {**kernel, "ci95": [k_lo / slow, k_hi / fast], "run_to_run": [fast, slow]}


def tie(a: list[float] | None, b: list[float] | None) -> bool:
    """Whether two speedups' intervals overlap (a ranking shows them as a tie)."""
    if not a or not b:
        return False
    return a[0] <= b[1] and b[0] <= a[1]
