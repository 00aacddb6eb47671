"""Dispatch: the job row is the truth; requests are idempotent; jobs start only after commit."""

from __future__ import annotations

import time

import pytest
from django.db import transaction

from gpu_workers import EvalResult, Finding
from webapp.arena import services
from webapp.arena.models import Evaluation, Hardware
from webapp.core import jobs

pytestmark = pytest.mark.django_db

HARDWARE = {
    "key": "cpu:Test CPU|torch-2.13.0|cuda-none",
    "name": "Test CPU",
    "torch": "2.13.0",
    "cuda": "none",
}


def _result(**overrides) -> EvalResult:
    data = dict(
        status="rejected",
        correct=True,
        reward=-1.0,
        timings_ms={"kernel": 0.5, "eager": 1.0, "compile": 2.0},
        speedup={"eager": 2.0, "compile": 4.0},
        hardware=HARDWARE,
        findings=[
            Finding("library_compute", "reject", "torch.matmul in forward", 1),
            Finding("suspicious_timing", "review", "too fast", None),
        ],
        rule_set={"name": "strict", "version": "2026.11.30"},
        reward_config={"name": "cuda_agent_levels", "version": 1},
        compile_log="built",
        run_log="ran",
    )
    data.update(overrides)
    return EvalResult(**data)


def test_store_result_writes_the_verdict_onto_the_row(make_evaluation):
    evaluation = make_evaluation(status="running", hardware=None)

    stored = services.evaluation_store_result(evaluation_id=evaluation.pk, result=_result())

    stored.refresh_from_db()
    assert (stored.status, stored.correct, stored.needs_review) == ("rejected", True, True)
    assert (stored.speedup_eager, stored.speedup_compile, stored.reward) == (2.0, 4.0, -1.0)
    assert [f["rule"] for f in stored.findings] == ["library_compute", "suspicious_timing"]
    assert stored.hardware.key == HARDWARE["key"]
    assert (stored.rule_set_name, stored.rule_set_version) == ("strict", "2026.11.30")
    assert (stored.reward_config_name, stored.reward_config_version) == ("cuda_agent_levels", "1")
    assert stored.logs == "built\nran"
    assert stored.finished is not None
    assert Hardware.objects.count() == 1


def test_request_is_idempotent_and_force_makes_a_new_row(make_kernel, django_capture_on_commit_callbacks):
    kernel = make_kernel()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        first = services.evaluation_request(kernel_id=kernel.pk, track="open")
        again = services.evaluation_request(kernel_id=kernel.pk, track="open")
        forced = services.evaluation_request(kernel_id=kernel.pk, track="open", force=True)

    assert first.pk == again.pk != forced.pk
    assert (first.status, first.device) == ("queued", "cpu")
    assert len(callbacks) == 2  # one job per new row, registered for after the commit


def test_request_after_an_evaluator_error_makes_a_new_row(
    make_evaluation, django_capture_on_commit_callbacks
):
    failed = make_evaluation(status="error", track="strict", hardware=None)

    with django_capture_on_commit_callbacks(execute=False):
        retry = services.evaluation_request(kernel_id=failed.kernel_id, track="strict")

    assert retry.pk != failed.pk
    assert retry.status == "queued"


def test_no_job_runs_when_the_transaction_rolls_back(make_kernel, django_capture_on_commit_callbacks):
    kernel = make_kernel()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        with pytest.raises(RuntimeError), transaction.atomic():
            services.evaluation_request(kernel_id=kernel.pk, track="strict")
            raise RuntimeError("boom")

    assert callbacks == []
    assert Evaluation.objects.count() == 0


def test_run_skips_a_finished_evaluation(make_evaluation):
    evaluation = make_evaluation(status="passed", eager=2.0)

    assert services.evaluation_run(evaluation_id=evaluation.pk) is None
    evaluation.refresh_from_db()
    assert (evaluation.status, evaluation.attempts) == ("passed", 0)


def test_unknown_track_is_refused(make_kernel):
    with pytest.raises(services.InvalidInput, match="track must be one of strict, open"):
        services.evaluation_request(kernel_id=make_kernel().pk, track="fast")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_embedded_worker_runs_a_real_evaluation(settings, make_silu_kernel):
    """No broker: the job runs on the in-process worker thread; the row goes queued -> running -> passed."""
    settings.JOB_BACKEND = "embedded"
    kernel = make_silu_kernel()

    evaluation = services.evaluation_request(kernel_id=kernel.pk, track="open")
    seen = set()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        evaluation.refresh_from_db()
        seen.add(evaluation.status)
        if evaluation.is_finished:
            break
        time.sleep(0.2)
    jobs.embedded_jobs_wait(timeout=60)

    evaluation.refresh_from_db()
    assert "running" in seen
    assert evaluation.status == "passed", (
        evaluation.status,
        evaluation.findings,
        evaluation.error,
        evaluation.logs,
    )
    assert evaluation.correct is True
    assert evaluation.speedup_eager > 0
    assert evaluation.hardware.key.startswith("cpu:")
    assert evaluation.rule_set_name == "open"


def test_evaluator_failure_is_an_error_row_not_a_verdict(make_evaluation):
    evaluation = make_evaluation(status="queued", hardware=None)
    evaluation.device = "tpu"  # the evaluator refuses the request itself
    evaluation.save(update_fields=["device"])

    services.evaluation_run(evaluation_id=evaluation.pk)

    evaluation.refresh_from_db()
    assert (evaluation.status, evaluation.attempts) == ("error", 1)
    assert "device must be one of" in evaluation.error
    assert evaluation.finished is not None


def test_inline_backend_runs_the_job_after_commit(settings, make_kernel, django_capture_on_commit_callbacks):
    settings.JOB_BACKEND = "inline"
    settings.EVAL_DEVICE = "tpu"  # the evaluator refuses at once: the job's path, without a real run
    kernel = make_kernel()

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        evaluation = services.evaluation_request(kernel_id=kernel.pk, track="strict")
        evaluation.refresh_from_db()
        status_before_commit = evaluation.status

    evaluation.refresh_from_db()
    assert len(callbacks) == 3  # the job, then its doorbell rings: claimed (running) and failed (error)
    assert status_before_commit == "queued"
    assert (evaluation.status, evaluation.attempts) == ("error", 1)


def test_cuda_evaluations_spread_over_the_workers_gpus_and_cpu_ones_take_none(settings):
    settings.EVAL_GPUS = 2
    picks = [services.evaluation_gpu(evaluation_id=i, device="cuda") for i in range(1, 7)]
    assert picks == [1, 0, 1, 0, 1, 0]
    assert services.evaluation_gpu(evaluation_id=5, device="cpu") is None
    settings.EVAL_GPUS = 1
    assert {services.evaluation_gpu(evaluation_id=i, device="cuda") for i in range(1, 5)} == {0}


# --- a verdict the infrastructure caused is never reused --------------------------------------------


def _resubmit(evaluation: Evaluation) -> Evaluation:
    kernel = evaluation.kernel
    again_kernel, again = services.kernel_submit(
        task=kernel.task, submitter_name=kernel.submitter.name, source=kernel.source, track=evaluation.track
    )
    assert again_kernel.pk == kernel.pk  # the same source: the same kernel row
    return again


@pytest.mark.parametrize("status", ["timeout", "error"])
def test_resubmitting_a_source_whose_verdict_the_machine_may_have_caused_evaluates_it_again(
    status, make_evaluation, django_capture_on_commit_callbacks
):
    stale = make_evaluation(status=status, hardware=None)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        again = _resubmit(stale)

    assert again.pk != stale.pk
    assert again.status == "queued"
    assert len(callbacks) == 1


@pytest.mark.parametrize("message", [
    "the candidate raised: CUDA error: out of memory",
    "infrastructure: waiting for GPU memory (not the kernel's verdict): the GPU had no room for 9 bytes",
])
def test_an_out_of_memory_verdict_is_an_infrastructure_error_and_is_evaluated_again(
    make_evaluation, django_capture_on_commit_callbacks, message
):
    evaluation = make_evaluation(status="running", hardware=None)
    result = _result(status="runtime_error", correct=False, findings=[], message=message)

    stored = services.evaluation_store_result(evaluation_id=evaluation.pk, result=result)
    with django_capture_on_commit_callbacks(execute=False):
        again = _resubmit(stored)

    assert (stored.status, stored.error_kind) == ("runtime_error", "infrastructure")
    assert again.pk != stored.pk


def test_a_verdict_of_the_kernel_itself_is_reused(make_evaluation, django_capture_on_commit_callbacks):
    verdict = make_evaluation(status="incorrect", hardware=None)

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        again = _resubmit(verdict)

    assert again.pk == verdict.pk
    assert callbacks == []


# --- the result and its review flags: one transaction -----------------------------------------------


@pytest.mark.slow
def test_a_crash_between_the_result_and_its_flags_stores_neither_and_the_redelivered_job_stores_both(
    make_silu_kernel, settings, django_capture_on_commit_callbacks
):
    from webapp.arena import hooks
    from webapp.review.models import Flag
    from webapp.review.services import flags_from_evaluation

    settings.REVIEW_EXTREME_SPEEDUP = 0.0  # every passed kernel gets an extreme-speedup flag
    kernel = make_silu_kernel()
    with django_capture_on_commit_callbacks(execute=False):
        evaluation = services.evaluation_request(kernel_id=kernel.pk, track="open")

    def crash(*, evaluation_id: int) -> None:
        raise RuntimeError("the worker died after storing the result")

    # the crash runs after the result is written and before the flags are
    hooks.evaluation_stored_unregister(flags_from_evaluation)
    hooks.evaluation_stored_register(crash)
    hooks.evaluation_stored_register(flags_from_evaluation)
    try:
        first = services.evaluation_run(evaluation_id=evaluation.pk)
    finally:
        hooks.evaluation_stored_unregister(crash)
    evaluation.refresh_from_db()
    after_crash = (first, evaluation.status, evaluation.attempts, Flag.objects.filter(kernel=kernel).count())

    stored = services.evaluation_run(evaluation_id=evaluation.pk)  # the job, delivered again

    assert after_crash == (None, "queued", 1, 0)
    assert "the worker died after storing the result" in evaluation.error
    assert (stored.status, stored.attempts, stored.error) == ("passed", 2, "")
    flags = sorted(Flag.objects.filter(kernel=kernel).values_list("evaluation_id", "source"))
    # one flag each, the redelivery adding none: the speedup's, and one for each review finding the
    # evaluator gave (an honest kernel can get one on a loaded machine, e.g. for its timing)
    reviewed = [f for f in stored.findings if f.get("severity") == "review"
                and f.get("rule") not in ("extreme_speedup", "impossible_speed")]
    assert not any(f.get("rule") == "impossible_speed" for f in stored.findings)
    assert flags == sorted([(evaluation.pk, "extreme_speedup")] + [(evaluation.pk, "evaluator_review")] * len(reviewed))
