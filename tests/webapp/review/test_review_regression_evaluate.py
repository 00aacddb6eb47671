"""One real CPU evaluation: a confirmed hack that no static rule catches is rejected by the full checker."""

from __future__ import annotations

import pytest
from review_sources import CACHING_HACK

from webapp.review import services

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_full_regression_run_evaluates_what_static_rules_miss(
    settings, make_kernel, make_evaluation, make_user
):
    # given: a confirmed output-caching hack on the open track (its stored evaluation passed, 5x)
    settings.REVIEW_REVIEWERS_PER_ITEM = 1
    rita = make_user("rita", reviewer=True)
    kernel = make_kernel(source=CACHING_HACK)
    make_evaluation(kernel=kernel, track="open", eager=5.0)
    case = services.case_ensure(kernel_id=kernel.pk)
    services.verdict_submit(case_id=case.pk, reviewer=rita, verdict="hack", family="4")

    # when
    static_only = services.regression_run()
    full = services.regression_run(full=True)  # runs gpu_workers.evaluate on the CPU (pure PyTorch)

    # then: no static rule rejects it; the evaluator's fresh-values timing check does
    assert static_only.not_rejected == [kernel.pk]
    assert full.not_rejected == []
    assert [(c.track, c.by) for c in full.cases] == [("open", ["timed_fingerprint_mismatch", "timed_output_mismatch"])]
