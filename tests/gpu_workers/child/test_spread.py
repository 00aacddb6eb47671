"""Spread of a timing and of a speedup: samples, median, quartiles, a distribution-free interval."""

import pytest

from gpu_workers.child.spread import lower_median, median_interval, speedup_interval, summary, tie


def test_summary_of_a_series():
    stats = summary([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    assert stats["samples"] == 9
    assert stats["median"] == 5.0
    assert (stats["q1"], stats["q3"]) == (2.5, 7.5)
    assert stats["iqr_rel"] == 1.0
    assert stats["ci95"] == [2.0, 9.0]  # n/2 ± 0.98·√9 = 4.5 ± 2.94 -> ranks 1 and 8


def test_median_interval_narrows_with_samples():
    many = [float(i) for i in range(1000)]
    lo, hi = median_interval(many)
    assert (lo, hi) == (469.0, 531.0)  # 500 ± 30.99


def test_few_samples_span_their_range():
    assert summary([2.0, 1.0]) == {"samples": 2, "median": 1.5, "q1": 1.0, "q3": 2.0, "iqr_rel": 1.0 / 1.5,
                                   "ci95": [1.0, 2.0]}
    assert summary([]) == {"samples": 0}


def test_lower_median_ignores_one_busy_sample():
    assert lower_median([0.13, 0.70]) == 0.13
    assert lower_median([0.70, 0.13, 0.14]) == 0.14
    assert lower_median([0.13, 0.70, 0.71, 0.14]) == 0.14


def test_speedup_interval_crosses_the_ends():
    assert speedup_interval({"ci95": [2.0, 4.0]}, {"ci95": [1.0, 2.0]}) == [1.0, 4.0]
    assert speedup_interval({"ci95": [2.0, 4.0]}, {"samples": 0}) is None


def test_overlapping_intervals_are_a_tie():
    assert tie([1.0, 1.1], [1.05, 1.2])
    assert not tie([1.0, 1.1], [1.11, 1.2])
    assert not tie(None, [1.0, 1.1])


def test_a_kernel_timed_once_gets_the_run_to_run_spread_of_its_kept_baseline():
    from gpu_workers.child.spread import run_to_run_factors, widened

    kernel = {"samples": 100, "median": 2.0, "ci95": [1.98, 2.02]}
    runs = summary([1.6, 2.0, 2.0, 2.4, 3.2])  # five evaluations: 0.8x to 1.6x of their median
    assert run_to_run_factors(runs) == pytest.approx((0.8, 1.6))
    wide = widened(kernel, run_to_run_factors(runs))
    assert wide["ci95"] == pytest.approx([1.98 / 1.6, 2.02 / 0.8])
    assert wide["run_to_run"] == pytest.approx([0.8, 1.6])
    # the identity's speedup then holds 1 where the kernel's own interval alone did not
    baseline = {"ci95": [1.6, 3.2]}
    assert speedup_interval({"ci95": [2.1, 2.2]}, kernel)[0] > 1.0
    assert tie(speedup_interval({"ci95": [2.1, 2.2]}, wide), [1.0, 1.0])
    assert speedup_interval(baseline, wide)[0] < 1.0 < speedup_interval(baseline, wide)[1]
    # too few evaluations to say, or no interval: no factors, and nothing widened
    assert run_to_run_factors(summary([1.6, 2.4])) is None and run_to_run_factors(None) is None
    assert widened(kernel, None) is kernel
