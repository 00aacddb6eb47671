"""Writes: launching a training run, the job that runs it, its events (metrics, samples,
checkpoints), cancelling.

The job row is the truth: ``training_run_execute`` writes status, timestamps and error. Every event
is stored in its own transaction (metrics rows have seq = step) and only then is the channel layer
group ``training_<id>`` rung. The training itself is ``training.runner.run_training`` (no Django).
"""

from __future__ import annotations

import copy
import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from django.conf import settings as django_settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from webapp.accounts.services import queue_cap_check, rate_limit_take
from webapp.arena.models import Submitter
from webapp.arena.services import InvalidInput, submitter_get_or_create
from webapp.core.events import ring
from webapp.core.models import ErrorKind
from webapp.core.permissions import is_staff, manage_check
from webapp.core.runner import (
    JobContext,
    JobKind,
    job_cancel,
    job_claim,
    job_enqueue_kind,
    job_run,
    worker_id,
)

from . import conf
from .models import (
    RegisteredModel,
    RegisteredTaskSet,
    TrainingCheckpoint,
    TrainingMetric,
    TrainingRun,
    TrainingSample,
)

logger = logging.getLogger(__name__)

__all__ = [
    "InvalidInput",
    "TrainingRunSink",
    "training_checkpoint_store",
    "training_config_build",
    "training_group",
    "training_metrics_store",
    "training_run_cancel",
    "training_run_claim",
    "training_run_execute",
    "training_run_finish",
    "training_run_launch",
    "training_run_started",
    "training_samples_store",
]

SOURCE_KINDS = ("suite", "jsonl", "variants_jsonl", "synthetic")
TINY_KINDS = ("tiny_llama", "tiny_gpt2")
# EvalRequest fields a non-staff config may set in evaluator.request (the rest are the server's).
USER_EVALUATOR_REQUEST_KEYS = frozenset({"trials", "baselines"})


def training_group(run_id: int) -> str:
    return f"training_{run_id}"


def _ring(run_id: int, seq: int | None = None) -> None:
    ring(group=training_group(run_id), seq=seq)


# --- building a config ---------------------------------------------------------------------------


def _deep_merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Dicts merge key by key; anything else (lists included, e.g. ``stages``) is replaced."""
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _model_from_label(label: str) -> dict[str, Any]:
    """``tiny:<kind>[,key=value…]`` (a model built from a config) or a path / hub name (pretrained)."""
    if label.startswith("tiny:"):
        kind, *pairs = [p.strip() for p in label[len("tiny:") :].split(",")]
        if kind not in TINY_KINDS:
            raise InvalidInput(f"base model 'tiny:<kind>': kind must be one of {', '.join(TINY_KINDS)}")
        model: dict[str, Any] = {"kind": kind, "name_or_path": ""}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep:
                raise InvalidInput(f"base model: expected key=value after the kind, got {pair!r}")
            model[key.strip()] = int(value) if value.strip().isdigit() else value.strip()
        return model
    return {"kind": "pretrained", "name_or_path": label}


def _model_label(model: dict[str, Any]) -> str:
    if model.get("kind") == "pretrained":
        return str(model.get("name_or_path", ""))
    sizes = ",".join(
        f"{k}={model[k]}" for k in ("hidden_size", "num_layers", "num_heads", "max_positions") if k in model
    )
    return f"tiny:{model.get('kind')}" + (f",{sizes}" if sizes else "")


def _sources_from_task_set(task_set: str) -> list[dict[str, Any]]:
    """``synthetic:N``, ``suite``, ``suite:name1,name2`` or ``jsonl:PATH``."""
    kind, _, rest = task_set.partition(":")
    kind, rest = kind.strip(), rest.strip()
    if kind == "synthetic":
        try:
            return [{"kind": "synthetic", "n": int(rest or 4)}]
        except ValueError as exc:
            raise InvalidInput("task set 'synthetic:N' needs a number of tasks") from exc
    if kind == "suite":
        names = [n.strip() for n in rest.split(",") if n.strip()]
        return [{"kind": "suite", **({"names": names} if names else {})}]
    if kind == "jsonl" and rest:
        return [{"kind": "jsonl", "path": rest}]
    raise InvalidInput("task set must be 'synthetic:N', 'suite', 'suite:name1,name2' or 'jsonl:PATH'")


def _task_set_label(sources: list[dict[str, Any]]) -> str:
    parts = []
    for src in sources:
        kind = src.get("kind")
        if kind == "synthetic":
            parts.append(f"synthetic:{src.get('n', 4)}")
        elif kind == "suite":
            parts.append("suite" + (":" + ",".join(src["names"]) if src.get("names") else ""))
        else:
            parts.append(f"{kind}:{src.get('path', '')}")
    return " + ".join(parts)


def _registered(model: type, label: str) -> str | None:
    field = "spec" if model is RegisteredTaskSet else "location"
    return model.objects.filter(name=label, enabled=True).values_list(field, flat=True).first()


def _registry_names(model: type) -> str:
    names = list(model.objects.filter(enabled=True).values_list("name", flat=True)[:50])
    return ", ".join(names) if names else "none is registered yet; ask a staff user"


def _path_free(model: type, label: str) -> bool:
    """A label that reads no server file: ``synthetic:N``, ``suite[:names]``, ``tiny:<kind>…``."""
    if model is RegisteredModel:
        return label.startswith("tiny:")
    return label.partition(":")[0].strip() in ("synthetic", "suite")


def _resolve(model: type, label: str, *, trusted: bool, what: str) -> str:
    """A registry name -> its server-side value. Anything else is used as is by staff; by other
    users only when it reads no server file (synthetic tasks, our suite, a tiny model)."""
    label = label.strip()
    if not label:
        return ""
    found = _registered(model, label)
    if found is not None:
        return found
    if trusted or _path_free(model, label):
        return label
    raise InvalidInput(f"{what} {label[:100]!r} is not registered; choose one of: {_registry_names(model)}")


def _untrusted_config_check(run_config: Any) -> None:
    """A non-staff config reads nothing from the server but what staff registered: data sources are
    synthetic, our suite, or a registered task set's; a pretrained model is a registered one's."""
    allowed_sources = []
    for spec in RegisteredTaskSet.objects.filter(enabled=True).values_list("spec", flat=True):
        try:
            allowed_sources.extend(_sources_from_task_set(spec))
        except InvalidInput:
            continue  # a broken registry entry allows nothing
    for src in [*run_config.data.sources, *run_config.data.eval_sources]:
        if not isinstance(src, dict):
            raise InvalidInput("invalid training config: every data source must be an object")
        if src.get("kind") in ("synthetic", "suite") and not {"path"} & set(src):
            continue
        if src not in allowed_sources:
            raise InvalidInput(
                "a task set that reads server files must be a registered one; choose one of: "
                f"{_registry_names(RegisteredTaskSet)}"
            )
    model = run_config.model
    if model.kind == "pretrained":
        allowed = set()
        for location in RegisteredModel.objects.filter(enabled=True).values_list("location", flat=True):
            try:
                allowed.add(_model_from_label(location).get("name_or_path"))
            except InvalidInput:
                continue
        if model.name_or_path not in allowed:
            raise InvalidInput(
                "a pretrained base model must be a registered one; choose one of: "
                f"{_registry_names(RegisteredModel)}"
            )
    extra = sorted(set(run_config.evaluator.request) - USER_EVALUATOR_REQUEST_KEYS)
    if extra:
        raise InvalidInput(
            f"evaluator.request may set only {sorted(USER_EVALUATOR_REQUEST_KEYS)}, not {extra}"
        )


def training_config_build(
    *,
    config: dict[str, Any],
    base_model: str = "",
    task_set: str = "",
    overrides: dict[str, Any] | None = None,
    trusted: bool = True,
) -> Any:
    """The validated ``training.recipes.RunConfig`` of a launch: ``config`` (a RunConfig dict, e.g.
    one of training/configs/*.json) with the base model, the task set and the hyperparameter
    overrides (merged key by key) applied. Anything wrong is an InvalidInput with the reason.

    ``base_model`` and ``task_set`` may name registered entries (RegisteredModel,
    RegisteredTaskSet). Not ``trusted`` (a non-staff user): registered names or labels that read no
    server file, and the final config may read no server file that staff did not register."""
    from training.recipes import RunConfig

    if not isinstance(config, dict):
        raise InvalidInput("the training config must be a JSON object (a RunConfig)")
    if overrides is not None and not isinstance(overrides, dict):
        raise InvalidInput("hyperparameter overrides must be a JSON object")
    base_model = _resolve(RegisteredModel, base_model, trusted=trusted, what="base model")
    task_set = _resolve(RegisteredTaskSet, task_set, trusted=trusted, what="task set")
    data = _deep_merge(config, overrides or {})
    if base_model.strip():
        data["model"] = {**(data.get("model") or {}), **_model_from_label(base_model.strip())}
    if task_set.strip():
        data["data"] = {**(data.get("data") or {}), "sources": _sources_from_task_set(task_set.strip())}
    try:
        run_config = RunConfig.from_dict(data)
        RunConfig.from_dict(run_config.to_dict())  # what the worker will read back
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise InvalidInput(f"invalid training config: {exc}") from exc
    for src in run_config.data.sources:
        if not isinstance(src, dict) or src.get("kind") not in SOURCE_KINDS:
            raise InvalidInput(f"invalid training config: data.sources kinds must be one of {SOURCE_KINDS}")
    if run_config.total_steps < 1:
        raise InvalidInput("invalid training config: the stages have no steps")
    if not trusted:
        _untrusted_config_check(run_config)
    return run_config


# --- launch and cancel -----------------------------------------------------------------------------


def training_run_launch(
    *,
    name: str,
    config: dict[str, Any],
    created_by: Any = None,
    recipe: str = "",
    base_model: str = "",
    task_set: str = "",
    overrides: dict[str, Any] | None = None,
) -> TrainingRun:
    """Validate, create a queued run and enqueue its job after commit (Celery queue ``gpu``; in the
    embedded mode, the web process's background worker). A bad config raises InvalidInput and
    nothing is written. A user (``created_by``) who is not staff may name only registered models
    and task sets, within their limits (LimitExceeded)."""
    user = created_by if getattr(created_by, "is_authenticated", False) else None
    run_config = training_config_build(
        config=config,
        base_model=base_model,
        task_set=task_set,
        overrides=overrides,
        trusted=user is None or is_staff(user),
    )
    name = (name or "").strip() or run_config.name
    stored = run_config.to_dict()
    with transaction.atomic():
        if user is not None:
            queue_cap_check(
                user=user,
                count=lambda: TrainingRun.objects.filter(
                    created_by=user, status__in=[TrainingRun.Status.QUEUED, TrainingRun.Status.RUNNING]
                ).count(),
                adding=1,
                cap=django_settings.LIMIT_QUEUED_TRAINING_RUNS,
                what="training runs",
            )
            rate_limit_take(
                user=user,
                action="training_launch",
                limit=django_settings.LIMIT_TRAINING_LAUNCHES_PER_MINUTE,
                what="training launches",
            )
        run = TrainingRun.objects.create(
            name=name[:128],
            recipe=(recipe or "")[:64],
            config=stored,
            config_hash=run_config.config_hash(),
            base_model=_model_label(stored["model"])[:500],
            task_set=_task_set_label(stored["data"]["sources"])[:500],
            total_steps=run_config.total_steps,
            created_by=created_by if getattr(created_by, "is_authenticated", False) else None,
        )
        run.out_dir = str(conf.runs_dir() / f"run_{run.pk}")
        run.save(update_fields=["out_dir"])
        job_enqueue_kind(TRAINING_RUN_JOB, run.pk)
    return run


def training_run_cancel(*, run_id: int, user: Any = None) -> TrainingRun:
    """A queued run is cancelled at once; a running one stops before its next step (it checkpoints
    first, so it can be resumed). A finished run is left as it is. ``user`` (a request's): its
    owner or staff only (NotAllowed)."""
    if user is not None:
        owner_id = TrainingRun.objects.filter(pk=run_id).values_list("created_by_id", flat=True).get()
        manage_check(user, owner_id, f"training run {run_id}")
    return job_cancel(TRAINING_RUN_JOB, run_id)


# --- the job ------------------------------------------------------------------------------------------


def training_run_claim(*, run_id: int) -> tuple[bool, bool]:
    """(claimed, resume): webapp.core.runner.job_claim for this process; a later attempt (its worker
    died) resumes from the last checkpoint."""
    claim = job_claim(TRAINING_RUN_JOB, run_id, worker=worker_id())
    return (claim is not None, claim is not None and claim.attempt > 1)


def _clean(value: Any) -> Any:
    """JSON PostgreSQL accepts: no NUL characters (a byte-level model may write byte 0), no NaN/inf."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def training_run_started(*, run_id: int, step: int, resumed: bool) -> None:
    """The runner (re)started at ``step``: rows after it belong to an attempt that died before its
    next checkpoint; they are removed, and the new attempt stores those steps again."""
    with transaction.atomic():
        TrainingMetric.objects.filter(run_id=run_id, step__gt=step).delete()
        TrainingSample.objects.filter(run_id=run_id, step__gt=step).delete()
        TrainingCheckpoint.objects.filter(run_id=run_id, step__gt=step).delete()
        fields: dict[str, Any] = {"step": step, "heartbeat": timezone.now()}
        if resumed:
            fields["resumed_from_step"] = step
        TrainingRun.objects.filter(pk=run_id).update(**fields)
        _ring(run_id)


def training_metrics_store(*, run_id: int, metrics: dict[str, Any]) -> TrainingMetric:
    """Store one step's RunMetrics (idempotent on (run, step)), then ring with the step."""
    data = _clean(dict(metrics))
    step = int(data["step"])
    with transaction.atomic():
        row, _ = TrainingMetric.objects.update_or_create(
            run_id=run_id, step=step, defaults={"stage": str(data.get("stage") or "")[:64], "data": data}
        )
        TrainingRun.objects.filter(pk=run_id).update(step=Greatest(F("step"), step), heartbeat=timezone.now())
        _ring(run_id, step)
    return row


def _best_turn(turns: list[dict[str, Any]]) -> dict[str, Any]:
    scored = [t for t in turns if isinstance(t.get("reward"), int | float)]
    return max(scored, key=lambda t: t["reward"]) if scored else (turns[0] if turns else {})


def training_samples_store(
    *, run_id: int, step: int, samples: Sequence[dict[str, Any]]
) -> list[TrainingSample]:
    """Store one step's sampled trajectories (replacing any of an attempt that died)."""
    rows = []
    for position, sample in enumerate(samples):
        sample = _clean(dict(sample))
        turns = [t for t in sample.get("turns") or [] if isinstance(t, dict)]
        best = _best_turn(turns)
        result = (best.get("outcome") or {}).get("result") or {}
        speedup = result.get("speedup") or {}
        rows.append(
            TrainingSample(
                run_id=run_id,
                step=step,
                position=position,
                task=str(sample.get("task", ""))[:255],
                group=int(sample.get("group") or 0),
                index=int(sample.get("index") or 0),
                reward=sample.get("reward"),
                status=str(best.get("status") or "")[:32],
                speedup_eager=speedup.get("eager"),
                speedup_compile=speedup.get("compile"),
                response=str(best.get("text") or ""),
                turns=turns,
            )
        )
    with transaction.atomic():
        TrainingSample.objects.filter(run_id=run_id, step=step).delete()
        TrainingSample.objects.bulk_create(rows)
        TrainingRun.objects.filter(pk=run_id).update(heartbeat=timezone.now())
        _ring(run_id)
    return rows


def _slug(text: str) -> str:
    # short enough that "train<id>-<slug>@step<n>" stays a valid submitter name (64 characters)
    return re.sub(r"\.\.+", ".", re.sub(r"[^A-Za-z0-9_.-]+", "-", text)).strip("-.")[:32] or "run"


def training_checkpoint_store(*, run_id: int, info: dict[str, Any]) -> TrainingCheckpoint:
    """A checkpoint row, and a leaderboard Submitter (kind ``checkpoint``) for it."""
    step = int(info["step"])
    with transaction.atomic():
        run = TrainingRun.objects.only("id", "name", "created_by").get(pk=run_id)
        submitter = submitter_get_or_create(
            created_by=run.created_by,
            name=f"train{run_id}-{_slug(run.name)}@step{step}",
            kind=Submitter.Kind.CHECKPOINT,
            metadata={
                "training_run_id": run_id,
                "step": step,
                "path": str(info["path"]),
                "stage": info.get("stage", ""),
                "config_hash": info.get("config_hash", ""),
            },
        )
        checkpoint, _ = TrainingCheckpoint.objects.update_or_create(
            run_id=run_id,
            step=step,
            defaults={
                "stage": str(info.get("stage") or "")[:64],
                "path": str(info["path"]),
                "config_hash": str(info.get("config_hash") or "")[:16],
                "submitter": submitter,
            },
        )
        TrainingRun.objects.filter(pk=run_id).update(heartbeat=timezone.now())
        _ring(run_id)
    return checkpoint


class TrainingRunSink:
    """training.metrics.MetricsSink for the web app: every emit returns once the rows are committed."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id

    def emit_metrics(self, metrics: Any) -> None:
        training_metrics_store(run_id=self.run_id, metrics=metrics.to_dict())

    def emit_trajectories(self, step: int, samples: Sequence[Any]) -> None:
        training_samples_store(run_id=self.run_id, step=step, samples=[s.to_dict() for s in samples])

    def emit_checkpoint(self, info: Any) -> None:
        training_checkpoint_store(run_id=self.run_id, info=info.to_dict())

    def emit_status(self, status: str, detail: dict[str, Any]) -> None:
        # "completed", "cancelled" and "failed" are written by training_run_execute (the job row).
        if status == "running":
            training_run_started(
                run_id=self.run_id, step=int(detail.get("step") or 0), resumed=bool(detail.get("resumed"))
            )


def training_run_finish(*, run_id: int, status: str, step: int, time_limit_error: str = "") -> TrainingRun:
    """The runner returned: ``completed`` -> succeeded, ``cancelled`` -> cancelled (or failed, with
    ``time_limit_error``, when it was the time limit that stopped it). Once only."""
    fields: dict[str, Any] = {"status": TrainingRun.Status.SUCCEEDED}
    if status == "cancelled" and time_limit_error:
        fields = {
            "status": TrainingRun.Status.FAILED,
            "error": time_limit_error,
            "error_kind": ErrorKind.INFRASTRUCTURE,
        }
    elif status == "cancelled":
        fields = {"status": TrainingRun.Status.CANCELLED}
    now = timezone.now()
    with transaction.atomic():
        TrainingRun.objects.filter(pk=run_id, status=TrainingRun.Status.RUNNING).update(
            step=step, finished=now, heartbeat=now, **fields
        )
        _ring(run_id)
    return TrainingRun.objects.get(pk=run_id)


def _training_execute(ctx: JobContext) -> Any:
    from training.recipes import RunConfig
    from training.runner import run_training

    run = TrainingRun.objects.get(pk=ctx.job_id)
    return run_training(
        RunConfig.from_dict(run.config),
        out_dir=run.out_dir,
        sink=TrainingRunSink(ctx.job_id),
        cancel=ctx.should_stop,  # polled before every step: a cancel, the time limit, a lost row
        resume=ctx.resumed,
    )


def _training_store(ctx: JobContext, result: Any) -> TrainingRun:
    stopped_by_time = result.status == "cancelled" and ctx.past_time_limit() and not ctx.cancel_requested()
    return training_run_finish(
        run_id=ctx.job_id,
        status=result.status,
        step=result.step,
        time_limit_error=ctx.time_limit_error() if stopped_by_time else "",
    )


def training_run_execute(*, run_id: int) -> TrainingRun | None:
    """The job: claim the row, run ``run_training`` with the database sink, write the outcome.

    On webapp.core.runner: a second delivery finds the row claimed (alive) or finished and does
    nothing; a row whose worker died is claimed again and resumes from its last checkpoint
    (``resume=True``); the database going away is retried; anything else ends the run ``failed``
    with the traceback.
    """
    return job_run(TRAINING_RUN_JOB, run_id, execute=_training_execute, store=_training_store)


TRAINING_RUN_JOB = JobKind(
    name="training run",
    model=TrainingRun,
    task="webapp.training_runs.tasks.training_run_task",
    ring=lambda run_id: _ring(run_id),
    time_limit_s=conf.soft_time_limit_s,
)


# --- a checkpoint on the leaderboard ---------------------------------------------------------------


def training_checkpoint_leaderboard(
    *,
    run_id: int,
    step: int,
    suite: str,
    level: int | None = None,
    settings: dict[str, Any] | None = None,
    created_by: Any = None,
) -> Any:
    """Evaluate checkpoint ``step`` of a run on a suite through the agent, as that checkpoint's
    leaderboard submitter: the checkpoint is exported once as a Hugging Face directory (next to the
    run's checkpoints), then one rollout per suite task runs it in the agent worker; each rollout's
    passing best kernel enters the leaderboard under the checkpoint's Submitter. Returns the
    RolloutBatch. ``settings`` are the rollouts' (track, device, max_turns, …)."""
    from pathlib import Path

    from training.export import EXPORT_INFO, ExportError, export_checkpoint
    from webapp.rollouts.services import rollout_launch_local_suite

    checkpoint = (
        TrainingCheckpoint.objects.select_related("run", "submitter").filter(run_id=run_id, step=step).first()
    )
    if checkpoint is None:
        raise InvalidInput(f"training run {run_id} has no checkpoint at step {step}")
    run = checkpoint.run
    if not run.out_dir:
        raise InvalidInput(f"training run {run_id} has no run directory")
    model_dir = Path(run.out_dir) / "exports" / f"step_{step:06d}"
    if not (model_dir / EXPORT_INFO).exists():
        try:
            export_checkpoint(run.out_dir, step, model_dir)
        except (ExportError, OSError) as exc:
            raise InvalidInput(f"cannot export step {step} of run {run_id}: {exc}") from exc
    submitter = checkpoint.submitter or training_checkpoint_store(
        run_id=run_id, info={"step": step, "path": checkpoint.path, "stage": checkpoint.stage,
                             "config_hash": checkpoint.config_hash}
    ).submitter
    return rollout_launch_local_suite(
        suite=suite,
        submitter=submitter,
        model_dir=str(model_dir.resolve()),
        settings=settings,
        level=level,
        created_by=created_by,
    )
