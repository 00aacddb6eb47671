"""The training job through the services, in-process on the CPU with the tiny recipe: launch,
execute, metrics per step, samples, checkpoints as submitters, cancel, resume after a crash, and
refused configs."""

from __future__ import annotations

import time

import pytest
from django.db import connection
from training_run_helpers import tiny_overrides

from webapp.arena.models import Submitter
from webapp.core.jobs import embedded_jobs_wait
from webapp.training_runs import selectors, services
from webapp.training_runs.models import TrainingCheckpoint, TrainingMetric, TrainingRun, TrainingSample


def _metric_steps(run_id: int) -> list[int]:
    return list(TrainingMetric.objects.filter(run_id=run_id).order_by("step").values_list("step", flat=True))


@pytest.mark.django_db
def test_launch_then_execute_stores_every_step_samples_and_checkpoint_submitters(
    tiny_config, django_user_model, django_capture_on_commit_callbacks
):
    user = django_user_model.objects.create_user(username="trainer", password="x")

    with django_capture_on_commit_callbacks(execute=True):  # the inline backend runs the job after commit
        run = services.training_run_launch(
            name="tiny",
            config=tiny_config,
            created_by=user,
            recipe="tiny_cpu_grpo",
            overrides=tiny_overrides(steps=3, checkpoint_every=2),
        )

    run.refresh_from_db()
    metrics = list(TrainingMetric.objects.filter(run=run).order_by("step"))
    samples = list(TrainingSample.objects.filter(run=run).order_by("step", "position"))
    checkpoints = list(
        TrainingCheckpoint.objects.filter(run=run).select_related("submitter").order_by("step")
    )
    assert (run.status, run.step, run.total_steps, run.attempts, run.error) == ("succeeded", 3, 3, 1, "")
    assert run.started is not None and run.finished is not None
    assert run.created_by == user
    assert run.config["stages"][0]["steps"] == 3 and run.config["model"]["hidden_size"] == 32
    assert run.base_model == "tiny:tiny_llama,hidden_size=32,num_layers=1,num_heads=2,max_positions=96"
    assert run.task_set == "synthetic:4"
    assert [m.step for m in metrics] == [1, 2, 3]
    assert all(m.data["step"] == m.step and m.data["num_rollouts"] == 2 for m in metrics)
    assert {
        "reward_mean",
        "reward_max",
        "kl",
        "policy_loss",
        "entropy",
        "response_length_mean",
        "eval_latency_mean_s",
        "hack_rate",
    } <= set(metrics[0].data)
    assert [(s.step, s.position) for s in samples] == [(1, 0), (1, 1), (2, 0), (2, 1), (3, 0), (3, 1)]
    assert all(s.status == "synthetic" and s.task.startswith("synthetic") for s in samples)
    assert all(len(s.turns) == 1 and s.response == s.turns[0]["text"] for s in samples)
    assert [c.step for c in checkpoints] == [2, 3]  # every 2 steps and at the end of the stage
    submitter = checkpoints[-1].submitter
    assert submitter.kind == Submitter.Kind.CHECKPOINT
    assert submitter.name == f"train{run.pk}-tiny@step3"
    assert submitter.metadata["training_run_id"] == run.pk and submitter.metadata["step"] == 3
    assert submitter.metadata["path"] == checkpoints[-1].path
    assert checkpoints[-1].path.startswith(run.out_dir)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "config, overrides, message",
    [
        (
            {"name": "x", "stages": [{"name": "s", "kind": "dance", "steps": 1}]},
            {},
            "stage kind must be one of",
        ),
        (None, {"algo": {"group_sizee": 2}}, "unknown algo fields: ['group_sizee']"),
        (None, {"stages": []}, "a run needs at least one stage"),
        (None, {"stages": [{"name": "g", "kind": "grpo", "steps": 0}]}, "the stages have no steps"),
        (None, {"data": {"sources": [{"kind": "ftp"}]}}, "data.sources kinds must be one of"),
        ("not a dict", {}, "must be a JSON object"),
    ],
)
def test_a_bad_config_is_refused_and_nothing_is_stored(tiny_config, config, overrides, message, runs_dir):
    config = tiny_config if config is None else config

    with pytest.raises(services.InvalidInput) as caught:
        services.training_run_launch(name="bad", config=config, overrides=overrides)

    assert message in str(caught.value)
    assert TrainingRun.objects.count() == 0
    assert not runs_dir.exists()


@pytest.mark.django_db
def test_base_model_and_task_set_are_applied_and_checked(tiny_config):
    run = services.training_run_launch(
        name="", config=tiny_config, base_model="tiny:tiny_gpt2,hidden_size=48", task_set="synthetic:7"
    )

    with pytest.raises(services.InvalidInput, match="kind must be one of"):
        services.training_run_launch(name="x", config=tiny_config, base_model="tiny:huge")
    with pytest.raises(services.InvalidInput, match="task set must be"):
        services.training_run_launch(name="x", config=tiny_config, task_set="ftp:thing")
    assert run.name == "tiny_cpu_grpo"
    assert (run.config["model"]["kind"], run.config["model"]["hidden_size"]) == ("tiny_gpt2", 48)
    assert run.config["data"]["sources"] == [{"kind": "synthetic", "n": 7}]
    assert TrainingRun.objects.count() == 1


@pytest.mark.django_db
def test_cancelling_a_queued_run_ends_it_at_once_and_the_job_then_does_nothing(tiny_config):
    run = services.training_run_launch(name="q", config=tiny_config)  # not committed: the job has not run

    services.training_run_cancel(run_id=run.pk)
    executed = services.training_run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert executed is None
    assert (run.status, run.cancel_requested, run.attempts) == ("cancelled", True, 0)
    assert TrainingMetric.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_cancel_stops_a_running_run_after_a_checkpoint(tiny_config, settings):
    settings.JOB_BACKEND = "embedded"  # the job runs on the background worker thread
    run = services.training_run_launch(
        name="long", config=tiny_config, overrides=tiny_overrides(steps=200, checkpoint_every=100)
    )
    deadline = time.monotonic() + 120
    while not TrainingMetric.objects.filter(run_id=run.pk).exists():
        assert time.monotonic() < deadline, "the run stored no step"
        time.sleep(0.1)

    services.training_run_cancel(run_id=run.pk)
    embedded_jobs_wait(timeout=120)

    run.refresh_from_db()
    steps = _metric_steps(run.pk)
    checkpoint = TrainingCheckpoint.objects.get(run=run)
    assert run.status == "cancelled"
    assert 1 <= run.step < 200
    assert steps == list(range(1, run.step + 1))
    assert checkpoint.step == run.step  # the runner checkpoints on cancel, so the run can resume
    assert checkpoint.submitter.kind == "checkpoint"


class WorkerDied(BaseException):
    """What a killed worker looks like from inside: the job stops mid-run and writes nothing more."""


@pytest.mark.django_db
def test_resume_after_a_crash_continues_from_the_last_checkpoint_without_duplicates(tiny_config, settings):
    from training.metrics import TIMING_FIELDS
    from training.recipes import RunConfig
    from training.runner import run_training

    run = services.training_run_launch(
        name="crashy", config=tiny_config, overrides=tiny_overrides(steps=4, checkpoint_every=2)
    )
    assert services.training_run_claim(run_id=run.pk) == (True, False)
    polls = []

    def dies_before_step_4() -> bool:
        polls.append(1)
        if len(polls) == 4:
            raise WorkerDied
        return False

    with pytest.raises(WorkerDied):  # the first worker: steps 1–3 stored, last checkpoint at step 2
        run_training(
            RunConfig.from_dict(run.config),
            out_dir=run.out_dir,
            sink=services.TrainingRunSink(run.pk),
            cancel=dies_before_step_4,
        )
    first_attempt = {m.step: m.data for m in TrainingMetric.objects.filter(run=run)}
    alive = services.training_run_execute(run_id=run.pk)  # a duplicate delivery while it looks alive
    settings.JOB_STALE_AFTER_S = 0  # now it is silent long enough to be claimed again

    services.training_run_execute(run_id=run.pk)

    run.refresh_from_db()
    after = {m.step: m.data for m in TrainingMetric.objects.filter(run=run)}
    assert alive is None
    assert sorted(first_attempt) == [1, 2, 3]
    assert list(TrainingCheckpoint.objects.filter(run=run).values_list("step", flat=True)) == [2, 4]
    assert (run.status, run.step, run.attempts, run.resumed_from_step) == ("succeeded", 4, 2, 2)
    assert _metric_steps(run.pk) == [1, 2, 3, 4]  # step 3 was redone, stored once
    assert TrainingSample.objects.filter(run=run, step=3).count() == 2

    def same(step: int) -> dict:
        return {k: v for k, v in first_attempt[step].items() if k not in TIMING_FIELDS}

    assert {k: v for k, v in after[3].items() if k not in TIMING_FIELDS} == same(3)  # resumed exactly
    assert after[1] == first_attempt[1] and after[2] == first_attempt[2]  # rows before the checkpoint kept


@pytest.mark.django_db
def test_a_failing_run_is_marked_failed_with_the_error(tiny_config, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run = services.training_run_launch(
            name="no-tasks",
            config=tiny_config,
            overrides={
                **tiny_overrides(steps=2),
                "data": {"sources": [{"kind": "jsonl", "path": "/nonexistent.jsonl"}]},
            },
        )

    run.refresh_from_db()
    assert run.status == "failed"
    assert "nonexistent.jsonl" in run.error
    assert selectors.training_run_state(run_id=run.pk)["finished"] is True
    assert connection.vendor == "postgresql"


@pytest.mark.django_db
def test_nul_bytes_and_nan_from_the_model_are_stored_safely(make_run):
    run = make_run()

    services.training_samples_store(
        run_id=run.pk,
        step=1,
        samples=[
            {
                "task": "t",
                "group": 0,
                "index": 0,
                "reward": float("nan"),
                "turns": [{"text": "a\x00b", "reward": 0.0, "status": "synthetic", "outcome": {}}],
            }
        ],
    )

    sample = TrainingSample.objects.get(run=run)
    assert sample.response == "a\ufffdb"
    assert sample.reward is None


@pytest.mark.django_db
def test_a_run_past_its_time_limit_stops_before_its_next_step_and_fails_with_the_limit(tiny_config):
    run = services.training_run_launch(name="slow", config=tiny_config, overrides=tiny_overrides(steps=50))
    TrainingRun.objects.filter(pk=run.pk).update(time_limit_s=0)  # out of time before the first step

    services.training_run_execute(run_id=run.pk)

    run.refresh_from_db()
    assert (run.status, run.error_kind, run.step) == ("failed", "infrastructure", 0)
    assert run.error == "the training run ran past its time limit of 0 s"
    assert run.cancel_requested is False
