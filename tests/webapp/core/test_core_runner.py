"""webapp.core.runner: claim, heartbeat, time limit, retry, fail and cancel, on the real job rows."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from webapp.arena.models import Evaluation
from webapp.arena.services import EVALUATION_JOB
from webapp.core import runner
from webapp.core.models import ErrorKind
from webapp.rollouts.models import Rollout
from webapp.rollouts.services import ROLLOUT_JOB

OTHER_HOST_WORKER = "another-host.invalid:4242"


def _dead_local_worker() -> str:
    """The worker id of a process of this host that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return f"{runner.worker_id().rpartition(':')[0]}:{child.pid}"


def _running(evaluation: Evaluation, *, worker: str, heartbeat_age_s: float, attempts: int = 1) -> Evaluation:
    now = timezone.now()
    Evaluation.objects.filter(pk=evaluation.pk).update(
        status="running",
        worker=worker,
        attempts=attempts,
        started=now - timedelta(hours=5),  # started long ago: only the heartbeat says whether it lives
        heartbeat=now - timedelta(seconds=heartbeat_age_s),
    )
    evaluation.refresh_from_db()
    return evaluation


def _mark_passed(ctx: runner.JobContext, outcome: str) -> str:
    Evaluation.objects.filter(pk=ctx.job_id).update(status="passed", message=outcome, finished=timezone.now())
    return outcome


@pytest.mark.django_db
def test_a_queued_row_is_claimed_once_for_this_worker(make_evaluation, settings):
    settings.EVAL_SOFT_TIME_LIMIT_S = 77
    evaluation = make_evaluation(status="queued", hardware=None)

    first = runner.job_claim(EVALUATION_JOB, evaluation.pk, worker="w1:1")
    second = runner.job_claim(EVALUATION_JOB, evaluation.pk, worker=OTHER_HOST_WORKER)

    evaluation.refresh_from_db()
    assert first == runner.Claim(attempt=1, time_limit_s=77)
    assert second is None  # alive elsewhere: its heartbeat is fresh
    assert (evaluation.status, evaluation.worker, evaluation.attempts, evaluation.time_limit_s) == (
        "running",
        "w1:1",
        1,
        77,
    )
    assert evaluation.heartbeat == evaluation.started


@pytest.mark.django_db
def test_a_live_workers_row_is_never_claimed_however_long_it_has_run(make_evaluation, settings):
    settings.JOB_STALE_AFTER_S = 40
    evaluation = _running(make_evaluation(status="queued"), worker=OTHER_HOST_WORKER, heartbeat_age_s=5)

    assert runner.job_claim(EVALUATION_JOB, evaluation.pk, worker="w2:2") is None

    evaluation.refresh_from_db()
    assert (evaluation.status, evaluation.worker, evaluation.attempts) == ("running", OTHER_HOST_WORKER, 1)


@pytest.mark.django_db
def test_a_row_whose_heartbeat_is_stale_is_claimed_again(make_evaluation, settings):
    settings.JOB_STALE_AFTER_S = 40
    evaluation = _running(make_evaluation(status="queued"), worker=OTHER_HOST_WORKER, heartbeat_age_s=41)

    claim = runner.job_claim(EVALUATION_JOB, evaluation.pk, worker="w2:2")

    evaluation.refresh_from_db()
    assert claim is not None and claim.attempt == 2
    assert (evaluation.status, evaluation.worker, evaluation.attempts) == ("running", "w2:2", 2)


@pytest.mark.django_db
def test_a_row_of_a_dead_process_of_this_host_is_claimed_at_once(make_evaluation, settings):
    settings.JOB_STALE_AFTER_S = 3600
    evaluation = _running(make_evaluation(status="queued"), worker=_dead_local_worker(), heartbeat_age_s=0)

    claim = runner.job_claim(EVALUATION_JOB, evaluation.pk, worker=runner.worker_id())

    assert claim is not None and claim.attempt == 2
    assert runner.worker_is_dead_here(runner.worker_id()) is False
    assert runner.worker_is_dead_here(OTHER_HOST_WORKER) is False  # another host: only its heartbeat counts


@pytest.mark.django_db
def test_a_dead_row_out_of_attempts_fails_as_infrastructure_instead_of_running(make_evaluation, settings):
    settings.JOB_MAX_ATTEMPTS = 3
    evaluation = _running(
        make_evaluation(status="queued"), worker=_dead_local_worker(), heartbeat_age_s=0, attempts=3
    )

    assert runner.job_claim(EVALUATION_JOB, evaluation.pk, worker=runner.worker_id()) is None

    evaluation.refresh_from_db()
    assert (evaluation.status, evaluation.error_kind, evaluation.attempts) == ("error", "infrastructure", 3)
    assert evaluation.error.startswith(
        "gave up after 3 attempts (JOB_MAX_ATTEMPTS); the last one: its worker "
    )
    assert evaluation.finished is not None


@pytest.mark.django_db
def test_cancel_ends_a_queued_rollout_at_once_and_asks_a_running_one(make_task, make_submitter):
    def rollout(status: str) -> Rollout:
        return Rollout.objects.create(
            task=make_task(),
            submitter=make_submitter(),
            base_url="http://127.0.0.1:9/v1",
            model="m",
            status=status,
        )

    queued, running = rollout("queued"), rollout("running")

    runner.job_cancel(ROLLOUT_JOB, queued.pk)
    runner.job_cancel(ROLLOUT_JOB, running.pk)

    queued.refresh_from_db()
    running.refresh_from_db()
    assert (queued.status, queued.stop_reason, queued.cancel_requested) == ("cancelled", "cancelled", True)
    assert queued.finished is not None
    assert (running.status, running.cancel_requested, running.finished) == ("running", True, None)
    with pytest.raises(ValueError, match="^evaluation jobs cannot be cancelled$"):
        runner.job_cancel(EVALUATION_JOB, queued.pk)


def _wait_for(condition, *, timeout_s: float = 30.0) -> bool:
    """Poll a database condition until it holds or the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.mark.django_db(transaction=True)
def test_the_heartbeat_stamps_the_row_while_the_job_runs(make_evaluation, settings):
    settings.JOB_HEARTBEAT_S = 0.05
    settings.JOB_STALE_AFTER_S = 30
    evaluation = make_evaluation(status="queued", hardware=None)
    seen = {}

    def execute(ctx: runner.JobContext) -> str:
        claimed = Evaluation.objects.get(pk=ctx.job_id).heartbeat
        seen["beat"] = _wait_for(lambda: Evaluation.objects.get(pk=ctx.job_id).heartbeat > claimed)
        return "done"

    result = runner.job_run(EVALUATION_JOB, evaluation.pk, execute=execute, store=_mark_passed)

    evaluation.refresh_from_db()
    assert seen == {"beat": True}
    assert result == "done"
    assert (evaluation.status, evaluation.message, evaluation.attempts) == ("passed", "done", 1)


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_lost_its_row_is_told_to_stop_and_stores_nothing(make_evaluation, settings):
    settings.JOB_HEARTBEAT_S = 0.05
    settings.JOB_STALE_AFTER_S = 30
    evaluation = make_evaluation(status="queued", hardware=None)
    stored = []

    def execute(ctx: runner.JobContext) -> str:
        # the sweeper gave the row to another worker while this one was cut off
        Evaluation.objects.filter(pk=ctx.job_id).update(worker=OTHER_HOST_WORKER)
        return "told to stop" if ctx.lost.wait(timeout=30) else "never told"

    result = runner.job_run(
        EVALUATION_JOB, evaluation.pk, execute=execute, store=lambda ctx, out: stored.append(out)
    )

    evaluation.refresh_from_db()
    assert (result, stored) == (None, [])
    assert (evaluation.status, evaluation.worker) == ("running", OTHER_HOST_WORKER)


@pytest.mark.django_db(transaction=True)
def test_a_job_past_its_time_limit_that_does_not_stop_is_failed_by_its_heartbeat(make_evaluation, settings):
    settings.JOB_HEARTBEAT_S = 0.05
    settings.JOB_STALE_AFTER_S = 0.2  # the grace after the limit
    evaluation = make_evaluation(status="queued", hardware=None)
    Evaluation.objects.filter(pk=evaluation.pk).update(time_limit_s=0)
    stops = []

    def execute(ctx: runner.JobContext) -> str:
        stops.append(ctx.should_stop())
        ctx.lost.wait(timeout=30)  # a job that ignores should_stop()
        return "late"

    result = runner.job_run(EVALUATION_JOB, evaluation.pk, execute=execute, store=_mark_passed)

    evaluation.refresh_from_db()
    assert (result, stops) == (None, [True])
    assert (evaluation.status, evaluation.error_kind) == ("error", "infrastructure")
    assert evaluation.error == "the evaluation ran past its time limit of 0 s and did not stop"


@pytest.mark.django_db
def test_the_database_going_away_puts_the_row_back_in_the_queue(
    make_evaluation, django_capture_on_commit_callbacks
):
    evaluation = make_evaluation(status="queued", hardware=None)

    def execute(ctx: runner.JobContext) -> str:
        raise OperationalError("server closed the connection unexpectedly")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        result = runner.job_run(EVALUATION_JOB, evaluation.pk, execute=execute, store=_mark_passed)

    evaluation.refresh_from_db()
    assert result is None
    assert (evaluation.status, evaluation.worker, evaluation.heartbeat, evaluation.attempts) == (
        "queued",
        "",
        None,
        1,
    )
    assert evaluation.error == "the database went away: server closed the connection unexpectedly"
    assert len(callbacks) == 3  # claimed (ring), enqueued again, requeued (ring)


@pytest.mark.django_db
def test_an_outcome_that_cannot_be_stored_is_retried_then_given_up(make_evaluation, settings):
    settings.JOB_MAX_ATTEMPTS = 2
    evaluation = make_evaluation(status="queued", hardware=None)

    def store(ctx: runner.JobContext, outcome: str) -> str:
        Evaluation.objects.filter(pk=ctx.job_id).update(status="passed")  # rolled back with the failure
        raise RuntimeError("disk full")

    runner.job_run(EVALUATION_JOB, evaluation.pk, execute=lambda ctx: "x", store=store)
    evaluation.refresh_from_db()
    after_first = (evaluation.status, evaluation.attempts, evaluation.error)
    runner.job_run(EVALUATION_JOB, evaluation.pk, execute=lambda ctx: "x", store=store)

    evaluation.refresh_from_db()
    assert after_first == ("queued", 1, "its outcome could not be stored: RuntimeError('disk full')")
    assert (evaluation.status, evaluation.error_kind, evaluation.attempts) == ("error", "infrastructure", 2)
    assert evaluation.error == (
        "gave up after 2 attempts (JOB_MAX_ATTEMPTS); the last one: "
        "its outcome could not be stored: RuntimeError('disk full')"
    )


@pytest.mark.django_db
def test_an_error_raised_by_the_job_fails_it_with_the_kinds_error_kind(
    make_evaluation, make_task, make_submitter
):
    evaluation = make_evaluation(status="queued", hardware=None)
    rollout = Rollout.objects.create(
        task=make_task(), submitter=make_submitter(), base_url="http://127.0.0.1:9/v1", model="m"
    )
    events = []

    def boom(ctx: runner.JobContext) -> str:
        raise ValueError("no such model")

    runner.job_run(EVALUATION_JOB, evaluation.pk, execute=boom, store=_mark_passed)
    runner.job_run(
        ROLLOUT_JOB,
        rollout.pk,
        execute=boom,
        store=_mark_passed,
        before_fail=lambda ctx, err: events.append(ctx.job_id),
    )

    evaluation.refresh_from_db()
    rollout.refresh_from_db()
    assert (evaluation.status, evaluation.error_kind) == ("error", ErrorKind.INFRASTRUCTURE)
    assert (rollout.status, rollout.error_kind, events) == ("failed", ErrorKind.JOB, [rollout.pk])
    assert "ValueError: no such model" in rollout.error


def test_heartbeat_threads_do_not_outlive_their_job():
    assert [t.name for t in threading.enumerate() if t.name.startswith("heartbeat-")] == []


@pytest.mark.django_db
def test_celerys_soft_time_limit_fails_the_row_with_the_time_limit(make_evaluation, settings):
    from celery.exceptions import SoftTimeLimitExceeded

    settings.EVAL_SOFT_TIME_LIMIT_S = 1800
    evaluation = make_evaluation(status="queued", hardware=None)

    def execute(ctx: runner.JobContext) -> str:
        raise SoftTimeLimitExceeded()

    runner.job_run(EVALUATION_JOB, evaluation.pk, execute=execute, store=_mark_passed)

    evaluation.refresh_from_db()
    assert (evaluation.status, evaluation.error_kind) == ("error", "infrastructure")
    assert evaluation.error == "the evaluation ran past its time limit of 1800 s"
