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


def test_geomean_over_all_attempted_is_none_when_nothing_passed():
    failed = [metrics.TaskOutcome(1, False), metrics.TaskOutcome(2, False)]

    assert metrics.geomean_speedup_all(failed, baseline="eager") is None
    assert metrics.geomean_speedup_all([], baseline="eager") is None


def _ranked(track="strict"):
    _, rows, _ = selectors.leaderboard_rows(track=track)
    return [(r.submitter, r.rank, r.tied) for r in rows]


def test_ties_share_a_rank_and_the_next_rank_skips(make_submitter, make_kernel, make_evaluation, make_task):
    # given: two submitters with identical figures, one better, one worse
    task_a, task_b = make_task(name="ta"), make_task(name="tb")
    for name, speedups in (
        ("zeta", (2.0, 0.5)),
        ("alpha", (2.0, 0.5)),
        ("mid", (3.0, None)),
        ("best", (2.0, 2.0)),
    ):
        sub = make_submitter(name=name)
        for task, speedup in zip((task_a, task_b), speedups, strict=True):
            status = "passed" if speedup else "incorrect"
            make_evaluation(kernel=make_kernel(task=task, submitter=sub), status=status, eager=speedup)

    # when
    ranked = _ranked()

    # then: best (fast_1 1.0) first; alpha and zeta tie at 2 (listed by name); mid (pass rate 0.5) is 4th
    assert ranked == [("best", 1, False), ("alpha", 2, True), ("zeta", 2, True), ("mid", 4, False)]


def test_ranking_puts_the_honest_submitter_above_hackers_and_broken_ones(
    make_submitter, make_kernel, make_evaluation, make_task
):
    # given: nobody beats eager; the honest one is correct everywhere, the others fail, hack or are not custom
    tasks = [make_task(name=f"task{i}") for i in range(2)]
    honest, broken, hacker, rewriter = (
        make_submitter(name=n) for n in ("zz-honest", "a-broken", "b-hacker", "c-rewriter")
    )
    for task in tasks:
        make_evaluation(kernel=make_kernel(task=task, submitter=honest), eager=0.8)
        make_evaluation(kernel=make_kernel(task=task, submitter=broken), status="compile_error")
        make_evaluation(
            kernel=make_kernel(task=task, submitter=hacker),
            status="rejected",
            eager=90.0,
            findings=[{"rule": "timer_mismatch", "severity": "reject", "message": "m", "family": 1}],
        )
        make_evaluation(
            kernel=make_kernel(task=task, submitter=rewriter),
            status="rejected",
            eager=1.1,
            findings=[{"rule": "library_compute", "severity": "reject", "message": "m", "family": 14}],
        )

    # when
    _, rows, _ = selectors.leaderboard_rows(track="strict")
    by_name = {r.submitter: r for r in rows}

    # then: the honest submitter is first; the three who passed nothing tie behind it
    assert [(r.submitter, r.rank) for r in rows] == [
        ("zz-honest", 1),
        ("a-broken", 2),
        ("b-hacker", 2),
        ("c-rewriter", 2),
    ]
    assert (by_name["b-hacker"].hacks_flagged, by_name["b-hacker"].not_custom) == (2, 0)
    assert (by_name["c-rewriter"].hacks_flagged, by_name["c-rewriter"].not_custom) == (0, 2)
    assert by_name["a-broken"].geomean_speedup_eager_all is None  # failed everything: no speedup, not 1x
    assert by_name["zz-honest"].geomean_speedup_eager_all == pytest.approx(0.8)


def test_geomeans_inside_the_measured_spread_tie(make_submitter, make_kernel, make_evaluation, make_task):
    # given: geomeans 1.50 and 1.52 (inside a 5% spread each) and 1.90 (outside)
    task = make_task(name="noisy")
    for name, speedup in (("a", 1.50), ("b", 1.52), ("c", 1.90)):
        ev = make_evaluation(
            kernel=make_kernel(task=task, submitter=make_submitter(name=name)), eager=speedup, compile=0.5
        )
        ev.result = {"timing_stats": {"kernel": {"spread": 0.03}, "eager": {"spread": 0.02}}}
        ev.save(update_fields=["result"])

    # when
    _, rows, _ = selectors.leaderboard_rows(track="strict")

    # then
    assert [(r.submitter, r.rank, r.tied) for r in rows] == [("c", 1, False), ("a", 2, True), ("b", 2, True)]
    assert {r.submitter: r.geomean_speedup_eager_spread for r in rows} == {
        "a": pytest.approx(0.05),
        "b": pytest.approx(0.05),
        "c": pytest.approx(0.05),
    }


def test_a_speedup_interval_wider_than_the_timings_spread_ties_its_rows(
    make_submitter, make_kernel, make_evaluation, make_task
):
    # given: 1.50 and 1.60, each with tight timings (1% each) but an interval of 1.2-1.9, as a
    # host-bound kernel's is once its kept baseline shows how far one run moves from the next
    task = make_task(name="host-bound")
    for name, speedup in (("a", 1.50), ("b", 1.60)):
        ev = make_evaluation(
            kernel=make_kernel(task=task, submitter=make_submitter(name=name)), eager=speedup, compile=0.5
        )
        ev.result = {"timing_stats": {"kernel": {"spread": 0.005}, "eager": {"spread": 0.005},
                                      "speedup_interval": {"eager": [1.2, 1.9]}}}
        ev.save(update_fields=["result"])

    _, rows, _ = selectors.leaderboard_rows(track="strict")

    # then they tie, on the interval's half-width in log terms
    assert [(r.submitter, r.rank, r.tied) for r in rows] == [("a", 1, True), ("b", 1, True)]
    assert rows[0].geomean_speedup_eager_spread == pytest.approx((math.log(1.9) - math.log(1.2)) / 2)


def test_without_spreads_close_geomeans_do_not_tie(make_submitter, make_kernel, make_evaluation, make_task):
    task = make_task(name="quiet")
    for name, speedup in (("a", 1.50), ("b", 1.52)):
        make_evaluation(kernel=make_kernel(task=task, submitter=make_submitter(name=name)), eager=speedup)

    assert _ranked() == [("b", 1, False), ("a", 2, False)]


def test_sorting_by_a_column_keeps_the_ranks(known_leaderboard):
    _, by_attempted, _ = selectors.leaderboard_rows(track="strict", sort="tasks_attempted")

    assert [(r.submitter, r.rank) for r in by_attempted] == [("beta", 2), ("alpha", 1)]
