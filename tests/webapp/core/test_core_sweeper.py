"""webapp.core.sweeper: rows of dead workers go back to the queue, by heartbeat age alone."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from webapp.arena import services as arena_services
from webapp.arena.models import Evaluation
from webapp.core.sweeper import jobs_sweep, sweeper_thread_start
from webapp.rollouts.models import Rollout
from webapp.training_runs.models import TrainingRun

DEAD = "gone-host.invalid:1"
ALIVE = "busy-host.invalid:2"


def _age(model, pk: int, *, worker: str, heartbeat_age_s: float | None, attempts: int = 1, **fields) -> None:
    now = timezone.now()
    model.objects.filter(pk=pk).update(
        status="running",
        worker=worker,
        attempts=attempts,
        started=now - timedelta(days=2),
        heartbeat=None if heartbeat_age_s is None else now - timedelta(seconds=heartbeat_age_s),
        **fields,
    )


@pytest.fixture
def rollout_row(make_task, make_submitter):
    def make() -> Rollout:
        return Rollout.objects.create(
            task=make_task(), submitter=make_submitter(), base_url="http://127.0.0.1:9/v1", model="m"
        )

    return make


@pytest.fixture
def training_row():
    def make() -> TrainingRun:
        return TrainingRun.objects.create(name="r", config={}, config_hash="h", base_model="b", task_set="t")

    return make


@pytest.mark.django_db
def test_stale_rows_of_every_kind_go_back_to_the_queue_and_live_ones_stay(
    make_evaluation, rollout_row, training_row, settings, django_capture_on_commit_callbacks
):
    settings.JOB_STALE_AFTER_S = 40
    dead_eval, live_eval = make_evaluation(status="queued"), make_evaluation(status="queued")
    dead_rollout, dead_run = rollout_row(), training_row()
    _age(Evaluation, dead_eval.pk, worker=DEAD, heartbeat_age_s=41)
    _age(Evaluation, live_eval.pk, worker=ALIVE, heartbeat_age_s=1)  # running for two days, beating
    _age(Rollout, dead_rollout.pk, worker=DEAD, heartbeat_age_s=300)
    _age(TrainingRun, dead_run.pk, worker=DEAD, heartbeat_age_s=None)  # never beat (an older row)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        report = jobs_sweep()

    rows = [
        Evaluation.objects.get(pk=dead_eval.pk),
        Rollout.objects.get(pk=dead_rollout.pk),
        TrainingRun.objects.get(pk=dead_run.pk),
    ]
    live_eval.refresh_from_db()
    assert report == {"evaluation": {"queued": 1}, "rollout": {"queued": 1}, "training run": {"queued": 1}}
    assert [(r.status, r.worker, r.heartbeat, r.attempts) for r in rows] == [("queued", "", None, 1)] * 3
    assert rows[0].error.startswith(f"its worker {DEAD} stopped sending heartbeats (last at ")
    assert (live_eval.status, live_eval.worker) == ("running", ALIVE)
    assert len(callbacks) == 6  # each swept row: enqueued again, and its doorbell
    assert jobs_sweep() == {}  # nothing left to sweep


@pytest.mark.django_db
def test_a_row_whose_workers_keep_dying_fails_as_infrastructure_and_resubmitting_evaluates_again(
    make_evaluation, settings, django_capture_on_commit_callbacks
):
    settings.JOB_STALE_AFTER_S = 40
    settings.JOB_MAX_ATTEMPTS = 3
    evaluation = make_evaluation(status="queued")
    _age(Evaluation, evaluation.pk, worker=DEAD, heartbeat_age_s=60, attempts=3)

    report = jobs_sweep()
    with django_capture_on_commit_callbacks(execute=False):
        again = arena_services.evaluation_request(kernel_id=evaluation.kernel_id, track=evaluation.track)

    evaluation.refresh_from_db()
    assert report == {"evaluation": {"error": 1}}
    assert (evaluation.status, evaluation.error_kind) == ("error", "infrastructure")
    assert evaluation.error.startswith(
        f"gave up after 3 attempts (JOB_MAX_ATTEMPTS); the last one: its worker {DEAD} stopped sending heartbeats"
    )
    assert again.pk != evaluation.pk and again.status == "queued"


@pytest.mark.django_db
def test_a_dead_row_whose_cancel_was_asked_ends_cancelled(rollout_row, training_row, settings):
    settings.JOB_STALE_AFTER_S = 40
    rollout, run = rollout_row(), training_row()
    _age(Rollout, rollout.pk, worker=DEAD, heartbeat_age_s=90, cancel_requested=True)
    _age(TrainingRun, run.pk, worker=DEAD, heartbeat_age_s=90, cancel_requested=True)

    report = jobs_sweep()

    rollout.refresh_from_db()
    run.refresh_from_db()
    assert report == {"rollout": {"cancelled": 1}, "training run": {"cancelled": 1}}
    assert (rollout.status, rollout.stop_reason) == ("cancelled", "cancelled")
    assert run.status == "cancelled" and run.finished is not None


@pytest.mark.django_db(transaction=True)
def test_the_embedded_sweeper_thread_requeues_a_dead_row_and_the_job_runs_again(make_evaluation, settings):
    settings.JOB_STALE_AFTER_S = 40
    settings.JOB_SWEEP_S = 0.05
    settings.JOB_BACKEND = "inline"  # the requeued job runs in the sweeper's thread, after its commit
    settings.EVAL_DEVICE = "tpu"
    evaluation = make_evaluation(status="queued", hardware=None)
    Evaluation.objects.filter(pk=evaluation.pk).update(device="tpu")  # the evaluator refuses it at once
    _age(Evaluation, evaluation.pk, worker=DEAD, heartbeat_age_s=120)
    stop = threading.Event()

    thread = sweeper_thread_start(stop)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not Evaluation.objects.get(pk=evaluation.pk).is_finished:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(timeout=30)

    evaluation.refresh_from_db()
    assert thread.is_alive() is False
    assert (evaluation.status, evaluation.attempts, evaluation.error_kind) == ("error", 2, "infrastructure")
    assert "device must be one of" in evaluation.error
