"""Leaderboard metrics against hand-computed values (DESIGN.md "Metrics")."""

from __future__ import annotations

import math

import pytest

from webapp.arena import metrics, selectors

pytestmark = pytest.mark.django_db


def test_fast_p_counts_only_correct_kernels_strictly_faster_than_p():
    outcomes = [
        metrics.TaskOutcome(1, True, 2.0, 0.5),
        metrics.TaskOutcome(2, True, 1.0, 1.5),  # exactly 1x is not faster
        metrics.TaskOutcome(3, False, None, None),
        metrics.TaskOutcome(4, True, 0.9, None),
    ]
    assert metrics.fast_p(outcomes, p=1.0, baseline="eager") == 0.25
    assert metrics.fast_p(outcomes, p=1.0, baseline="compile") == 0.25
    assert metrics.fast_p(outcomes, p=0.0, baseline="eager") == 0.75
    assert metrics.fast_p([], p=1.0, baseline="eager") is None


def test_geomeans_over_correct_and_with_failures_as_one():
    outcomes = [
        metrics.TaskOutcome(1, True, 2.0, None),
        metrics.TaskOutcome(2, True, 8.0, 4.0),
        metrics.TaskOutcome(3, False, None, None),
    ]
    assert metrics.geomean_speedup_correct(outcomes, baseline="eager") == pytest.approx(4.0)
    assert metrics.geomean_speedup_all(outcomes, baseline="eager") == pytest.approx(16 ** (1 / 3))
    assert metrics.geomean_speedup_correct(outcomes, baseline="compile") == pytest.approx(4.0)
    assert metrics.geomean_speedup_all(outcomes, baseline="compile") == pytest.approx(4 ** (1 / 3))
    assert metrics.geomean_speedup_correct([metrics.TaskOutcome(1, False)], baseline="eager") is None


def test_leaderboard_rows_match_hand_computed_values(known_leaderboard):
    data = known_leaderboard

    hardware, rows, _ = selectors.leaderboard_rows(track="strict")

    assert hardware == data["hardware"]
    assert [r.submitter for r in rows] == ["alpha", "beta"]
    alpha, beta = rows
    assert alpha.tasks_attempted == 4
    assert alpha.tasks_passed == 3
    assert alpha.pass_rate == 0.75
    assert alpha.fast_1_eager == 0.5  # t1 (2.0) and t4 (4.0); the rejected 50x does not count
    assert alpha.fast_1_compile == 0.25  # t4 only: the t1 tie resolves to the earlier 0.5x
    assert alpha.geomean_speedup_eager == pytest.approx(4 ** (1 / 3))  # 2 * 0.5 * 4
    assert alpha.geomean_speedup_eager_all == pytest.approx(math.sqrt(2))  # (2 * 0.5 * 1 * 4) ** (1/4)
    assert alpha.geomean_speedup_compile == pytest.approx(0.25 ** (1 / 3))  # 0.5 * 0.25 * 2
    assert alpha.geomean_speedup_compile_all == pytest.approx(0.25 ** (1 / 4))
    assert alpha.hacks_flagged == 1
    assert beta.tasks_attempted == 2  # queued, 'error' and other-hardware runs are not attempts
    assert beta.tasks_passed == 1
    assert beta.pass_rate == 0.5
    assert beta.fast_1_eager == 0.0
    assert beta.fast_1_compile == 0.0
    assert beta.geomean_speedup_eager == pytest.approx(1.0)
    assert beta.geomean_speedup_eager_all == pytest.approx(1.0)
    assert beta.geomean_speedup_compile is None
    assert beta.geomean_speedup_compile_all == pytest.approx(1.0)
    assert beta.hacks_flagged == 0


def test_best_evaluation_per_task_prefers_fastest_correct_and_earliest_on_ties(known_leaderboard):
    data = known_leaderboard

    entries = selectors.leaderboard_entries(
        track="strict", hardware_id=data["hardware"].pk, submitter_id=data["alpha"].pk
    )

    by_task = {e.task_name: e for e in entries}
    assert by_task["t1_relu"].evaluation_id == data["a_t1_first"].pk
    assert by_task["t1_relu"].evaluations == 2
    assert by_task["t4_attn"].evaluation_id == data["a_t4"].pk
    assert by_task["t4_attn"].hacked is True
    assert by_task["t3_mlp"].status == "incorrect"
    assert [e.task_name for e in entries if e.in_figure("fast_1_eager")] == ["t1_relu", "t4_attn"]


def test_leaderboard_filters_by_level_track_and_hardware(known_leaderboard):
    data = known_leaderboard

    _, level2, _ = selectors.leaderboard_rows(track="strict", level=2)
    _, open_rows, _ = selectors.leaderboard_rows(track="open")
    other, other_rows, _ = selectors.leaderboard_rows(
        track="strict", hardware_key="cuda:H200|torch-2.13.0|cuda-12.8"
    )

    assert [(r.submitter, r.tasks_attempted, r.pass_rate) for r in level2] == [("alpha", 2, 0.5)]
    assert [(r.submitter, r.tasks_attempted) for r in open_rows] == [("alpha", 1)]
    assert open_rows[0].geomean_speedup_eager == pytest.approx(3.0)
    assert other.key.startswith("cuda:H200")
    assert [(r.submitter, r.fast_1_eager) for r in other_rows] == [("beta", 1.0)]
    assert data["beta"].name == "beta"


def test_leaderboard_sort_puts_missing_values_last_and_breaks_ties_by_name(known_leaderboard):
    _, by_compile, _ = selectors.leaderboard_rows(track="strict", sort="-geomean_speedup_compile")
    _, by_name_desc, _ = selectors.leaderboard_rows(track="strict", sort="-submitter")
    _, bogus, _ = selectors.leaderboard_rows(track="strict", sort="drop table")

    assert [r.submitter for r in by_compile] == ["alpha", "beta"]  # beta has None
    assert [r.submitter for r in by_name_desc] == ["beta", "alpha"]
    assert [r.submitter for r in bogus] == ["alpha", "beta"]


def test_leaderboard_without_evaluations_is_empty():
    hardware, rows, entries = selectors.leaderboard_rows(track="strict")

    assert (hardware, rows, entries) == (None, [], [])
