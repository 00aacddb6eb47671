"""Writes: launching rollouts (one task or a whole suite), the rollout job, its events, cancelling.

The job row is the truth: ``rollout_run`` writes status, timestamps, error and the summary. Events
are stored one by one (each in its own transaction) and only then is the channel layer rung.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from webapp.accounts.services import queue_cap_check, rate_limit_take
from webapp.arena.models import Evaluation, Kernel, Submitter, Task
from webapp.arena.services import (
    Conflict,
    InvalidInput,
    evaluation_store_result,
    kernel_create,
    submitter_for_user,
    submitter_get_or_create,
)
from webapp.core.models import ErrorKind
from webapp.core.permissions import manage_check
from webapp.core.runner import (
    JobContext,
    JobKind,
    job_cancel,
    job_claim,
    job_enqueue_kind,
    job_run,
    worker_id,
)

from . import conf, selectors
from .doorbell import rollout_ring
from .models import LlmEndpoint, Rollout, RolloutBatch, RolloutEvent

logger = logging.getLogger(__name__)

__all__ = [
    "Conflict",
    "InvalidInput",
    "RolloutEventSink",
    "llm_endpoint_api_key",
    "llm_endpoint_builtin_start",
    "llm_endpoint_register",
    "rollout_cancel",
    "rollout_claim",
    "rollout_config_build",
    "rollout_event_store",
    "rollout_finish",
    "rollout_launch",
    "rollout_launch_local_suite",
    "rollout_launch_suite",
    "rollout_error_event",
    "rollout_run",
]

# RolloutConfig fields a user may set (the rest are ours: task name, evaluator overrides, token ids).
USER_SETTINGS = frozenset(
    {
        "max_turns",
        "max_total_tokens",
        "max_wall_s",
        "context_tokens",
        "max_completion_tokens",
        "temperature",
        "device",
        "track",
        "baselines",
        "trials",
        "use_tools",
        "target_speedup",
        "max_consecutive_invalid",
        "keep_recent_turns",
        "contrastive_k",
        "seed",
    }
)
DEVICES = ("cpu", "cuda")
SUITE_MAX_TASKS = 1000
# A rollout whose base_url starts with this runs a local Hugging Face directory (an exported training
# checkpoint) in the agent worker. Only trusted services create such rows: _base_url_check refuses
# the scheme in anything a user sends.
LOCAL_MODEL_SCHEME = "local:"


def llm_endpoint_register(
    *,
    name: str,
    base_url: str,
    model: str,
    api_key_env: str = "",
    description: str = "",
    builtin: bool = False,
) -> LlmEndpoint:
    """Create or update the endpoint ``name`` (staff: admin, commands, the demo). The key itself is
    never stored: ``api_key_env`` names the worker's environment variable that holds it."""
    endpoint = LlmEndpoint.objects.filter(name=name).first() or LlmEndpoint(name=name)
    endpoint.base_url = (base_url or "").strip()
    endpoint.model = (model or "").strip()
    endpoint.api_key_env = (api_key_env or "").strip()
    endpoint.description = description
    endpoint.builtin = builtin
    endpoint.enabled = True
    try:
        endpoint.full_clean()
    except ValidationError as exc:
        raise InvalidInput("; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())) from exc
    endpoint.save()
    return endpoint


def llm_endpoint_api_key(*, endpoint: LlmEndpoint | None) -> str | None:
    """The key of an endpoint, from the environment of the process that calls it (the worker)."""
    if endpoint is None:  # rollouts launched before endpoints were registered
        return getattr(django_settings, "KERNELCOURT_LLM_API_KEY", None) or None
    if not endpoint.api_key_env:
        return None
    return os.environ.get(endpoint.api_key_env) or None


def _endpoint_get(name: str) -> LlmEndpoint:
    endpoint = LlmEndpoint.objects.filter(name=name, enabled=True).first()
    if endpoint is None:
        names = ", ".join(LlmEndpoint.objects.filter(enabled=True).values_list("name", flat=True)[:50])
        raise InvalidInput(
            f"no LLM endpoint {name[:80]!r}; choose one of: {names or 'none is registered (ask a staff user)'}"
        )
    return endpoint


def rollout_config_build(*, task: Task, settings: dict[str, Any] | None) -> dict[str, Any]:
    """Validate the user's settings and return what the row stores: ``{"config": RolloutConfig.to_dict(),
    "contrastive": bool, "contrastive_variants": n}``. Contrastive mode samples earlier kernels of the
    task, with their measured speedups, from the database (CUDA-L1)."""
    from agent import RolloutConfig

    given = dict(settings or {})
    contrastive = bool(given.pop("contrastive", False))
    unknown = sorted(set(given) - USER_SETTINGS)
    if unknown:
        raise InvalidInput(f"unknown settings {unknown}; allowed: {sorted(USER_SETTINGS | {'contrastive'})}")
    track = given.get("track", Evaluation.Track.STRICT)
    if track not in Evaluation.Track.values:
        raise InvalidInput(f"track must be one of {', '.join(Evaluation.Track.values)}")
    device = given.get("device", django_settings.EVAL_DEVICE)
    if device not in DEVICES:
        raise InvalidInput(f"device must be one of {', '.join(DEVICES)}")
    max_turns = given.get("max_turns", 200)
    if (
        not isinstance(max_turns, int)
        or isinstance(max_turns, bool)
        or not 1 <= max_turns <= conf.MAX_TURNS_LIMIT
    ):
        raise InvalidInput(f"max_turns must be an integer from 1 to {conf.MAX_TURNS_LIMIT}")
    trials = given.get("trials", django_settings.EVAL_TRIALS)
    if not isinstance(trials, int) or isinstance(trials, bool) or not 1 <= trials <= 50:
        raise InvalidInput("trials must be an integer from 1 to 50")
    values: dict[str, Any] = {
        "baselines": tuple(django_settings.EVAL_BASELINES),
        "trials": django_settings.EVAL_TRIALS,
        **given,
        "track": track,
        "device": device,
        "max_turns": max_turns,
        "task_name": task.name,
    }
    if "target_speedup" not in given and "compile" not in tuple(values["baselines"]):
        # the agent's default target is 1.05x over torch.compile: without that baseline, no target
        values["target_speedup"] = None
    variants = []
    if contrastive:
        variants = selectors.contrastive_variants(task_id=task.pk, track=track)
        values["contrastive_variants"] = variants
    try:
        config = RolloutConfig.for_evaluation(**values)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"invalid settings: {exc}") from exc
    return {"config": config.to_dict(), "contrastive": contrastive, "contrastive_variants": len(variants)}


def _enqueue(rollout_id: int) -> None:
    job_enqueue_kind(ROLLOUT_JOB, rollout_id)


def _rollout_create(
    *,
    task: Task,
    submitter: Submitter,
    endpoint: LlmEndpoint | None,
    settings: dict[str, Any] | None,
    created_by: Any = None,
    batch: RolloutBatch | None = None,
    base_url: str = "",
    model: str = "",
) -> Rollout:
    """A queued rollout of a registered endpoint, or (``endpoint`` None, trusted callers only) of the
    model at ``base_url``: a ``local:`` directory."""
    rollout = Rollout.objects.create(
        task=task,
        submitter=submitter,
        batch=batch,
        endpoint=endpoint,
        base_url=endpoint.base_url if endpoint else base_url,
        model=endpoint.model if endpoint else model,
        settings=rollout_config_build(task=task, settings=settings),
        created_by=created_by if getattr(created_by, "is_authenticated", False) else None,
    )
    _enqueue(rollout.pk)
    return rollout


def _launch_common(
    *, submitter_name: str, submitter_kind: str | None, endpoint: str, created_by: Any, adding: int
) -> tuple[Submitter, LlmEndpoint]:
    """The registered endpoint, the submitter (one the user may use), and the user's limits."""
    found = _endpoint_get(endpoint)
    user = created_by if getattr(created_by, "is_authenticated", False) else None
    if user is None:
        return submitter_get_or_create(
            name=submitter_name or "", kind=submitter_kind or Submitter.Kind.AGENT
        ), found
    submitter = submitter_for_user(
        name=submitter_name or "", user=user, kind=submitter_kind, default_kind=Submitter.Kind.AGENT
    )
    queue_cap_check(
        user=user,
        count=lambda: Rollout.objects.filter(
            created_by=user, status__in=[Rollout.Status.QUEUED, Rollout.Status.RUNNING]
        ).count(),
        adding=adding,
        cap=django_settings.LIMIT_QUEUED_ROLLOUTS,
        what="rollouts",
    )
    rate_limit_take(
        user=user,
        action="rollout_launch",
        limit=django_settings.LIMIT_ROLLOUT_LAUNCHES_PER_MINUTE,
        what="rollout launches",
    )
    return submitter, found


def rollout_launch(
    *,
    task_id: int,
    submitter_name: str,
    endpoint: str,
    settings: dict[str, Any] | None = None,
    submitter_kind: str | None = None,
    created_by: Any = None,
) -> Rollout:
    """Create a queued rollout of one task and run it after commit (queue ``agent``; in the embedded
    mode, on the background worker), asking the registered LLM endpoint ``endpoint`` (by name).
    With ``created_by`` (a request's user): under a submitter that user may use (NotAllowed), within
    their limits (LimitExceeded)."""
    task = Task.objects.filter(pk=task_id).first()
    if task is None:
        raise InvalidInput(f"no task {task_id}")
    with transaction.atomic():
        submitter, found = _launch_common(
            submitter_name=submitter_name,
            submitter_kind=submitter_kind,
            endpoint=endpoint,
            created_by=created_by,
            adding=1,
        )
        return _rollout_create(
            task=task, submitter=submitter, endpoint=found, settings=settings, created_by=created_by
        )


def rollout_launch_suite(
    *,
    suite: str,
    submitter_name: str,
    endpoint: str,
    settings: dict[str, Any] | None = None,
    level: int | None = None,
    submitter_kind: str | None = None,
    created_by: Any = None,
) -> RolloutBatch:
    """One rollout per task of a suite (optionally one level), all or nothing."""
    tasks = _suite_tasks(suite=suite, level=level)
    with transaction.atomic():
        submitter, found = _launch_common(
            submitter_name=submitter_name,
            submitter_kind=submitter_kind,
            endpoint=endpoint,
            created_by=created_by,
            adding=len(tasks),
        )
        return _batch_create(
            tasks=tasks, suite=suite, level=level, submitter=submitter, endpoint=found, base_url=found.base_url,
            model=found.model, settings=settings, created_by=created_by,
        )


def rollout_launch_local_suite(
    *,
    suite: str,
    submitter: Submitter,
    model_dir: str,
    settings: dict[str, Any] | None = None,
    level: int | None = None,
    created_by: Any = None,
) -> RolloutBatch:
    """One rollout per task of a suite with a local Hugging Face directory as the model (e.g. an
    exported training checkpoint), under ``submitter``; for trusted callers only (the path is
    loaded by the agent worker)."""
    tasks = _suite_tasks(suite=suite, level=level)
    with transaction.atomic():
        return _batch_create(
            tasks=tasks, suite=suite, level=level, submitter=submitter, endpoint=None,
            base_url=LOCAL_MODEL_SCHEME + model_dir, model=model_dir, settings=settings, created_by=created_by,
        )


def _suite_tasks(*, suite: str, level: int | None) -> list[Task]:
    tasks = Task.objects.filter(suite=suite)
    if level is not None:
        tasks = tasks.filter(level=level)
    found = list(tasks.order_by("level", "name", "id")[: SUITE_MAX_TASKS + 1])
    if not found:
        raise InvalidInput(
            f"no tasks in suite {suite!r}" + (f" at level {level}" if level is not None else "")
        )
    if len(found) > SUITE_MAX_TASKS:
        raise InvalidInput(
            f"suite {suite!r} has more than {SUITE_MAX_TASKS} tasks; launch one level at a time"
        )
    return found


def _batch_create(
    *,
    tasks: list[Task],
    suite: str,
    level: int | None,
    submitter: Submitter,
    endpoint: LlmEndpoint | None,
    base_url: str,
    model: str,
    settings: dict[str, Any] | None,
    created_by: Any,
) -> RolloutBatch:
    batch = RolloutBatch.objects.create(
        suite=suite,
        level=level,
        submitter=submitter,
        endpoint=endpoint,
        base_url=base_url,
        model=model,
        settings=dict(settings or {}),
        created_by=created_by if getattr(created_by, "is_authenticated", False) else None,
    )
    for task in tasks:
        _rollout_create(
            task=task,
            submitter=submitter,
            endpoint=endpoint,
            base_url=base_url,
            model=model,
            settings=settings,
            created_by=created_by,
            batch=batch,
        )
    return batch


def rollout_cancel(*, rollout_id: int, user: Any = None) -> Rollout:
    """Ask a rollout to stop. A queued one is cancelled at once; a running one stops before its next
    turn or evaluation (the job writes the final state). A finished one is left as it is.
    ``user`` (a request's): its owner or staff only (NotAllowed)."""
    if user is not None:
        owner_id = Rollout.objects.filter(pk=rollout_id).values_list("created_by_id", flat=True).get()
        manage_check(user, owner_id, f"rollout {rollout_id}")
    return job_cancel(ROLLOUT_JOB, rollout_id)


# --- the job ---------------------------------------------------------------------------------------


def rollout_claim(*, rollout_id: int) -> bool:
    """Claim the row for this process (webapp.core.runner.job_claim): a queued row, or a running one
    whose worker is dead. False when there is nothing to run (finished, cancelled, or alive elsewhere)."""
    return job_claim(ROLLOUT_JOB, rollout_id, worker=worker_id()) is not None


def rollout_event_store(*, rollout_id: int, event: Any) -> RolloutEvent:
    """Store one TrajectoryEvent (idempotent on (rollout, seq)), then ring with its seq."""
    with transaction.atomic():
        row, created = RolloutEvent.objects.get_or_create(
            rollout_id=rollout_id,
            seq=event.seq,
            defaults={
                "kind": event.kind,
                "role": event.role or "",
                "turn": event.turn or 0,
                "content": event.content or "",
                "tool_call": event.tool_call,
                "evaluation": event.evaluation,
                "reward": event.reward,
                "prompt_tokens": event.prompt_tokens or 0,
                "completion_tokens": event.completion_tokens or 0,
                "elapsed_s": event.elapsed_s or 0.0,
                "data": event.data or {},
            },
        )
        if created:
            counts: dict[str, Any] = {
                "heartbeat": timezone.now(),
                "turns": Greatest(F("turns"), event.turn or 0),
            }
            if event.kind == "assistant":
                counts["prompt_tokens"] = F("prompt_tokens") + (event.prompt_tokens or 0)
                counts["completion_tokens"] = F("completion_tokens") + (event.completion_tokens or 0)
            if event.kind == "evaluation":
                counts["evaluations"] = F("evaluations") + 1
            Rollout.objects.filter(pk=rollout_id).update(**counts)
        rollout_ring(rollout_id=rollout_id, seq=event.seq)
    return row


class RolloutEventSink:
    """agent.EventSink for the web app: ``emit`` returns once the row is committed."""

    def __init__(self, rollout_id: int) -> None:
        self.rollout_id = rollout_id

    def emit(self, event: Any) -> None:
        rollout_event_store(rollout_id=self.rollout_id, event=event)


def rollout_error_event(*, rollout_id: int, error: str) -> None:
    """The worker or the endpoint failed: an ``error`` event for the stream (the runner then fails the row)."""
    from agent import TrajectoryEvent

    last = selectors.rollout_last_seq(rollout_id=rollout_id)
    rollout_event_store(
        rollout_id=rollout_id,
        event=TrajectoryEvent(
            rollout_id=str(rollout_id), seq=last + 1, kind="error", role="system", content=error[-20_000:]
        ),
    )


def _best_kernel_store(*, rollout: Rollout, summary: Any) -> tuple[Kernel | None, Evaluation | None, str]:
    """The best passing kernel under the rollout's submitter, with the evaluation the agent measured,
    so it enters the leaderboard (track and device of the rollout)."""
    from gpu_workers import EvalResult

    config = rollout.config
    try:
        kernel, _ = kernel_create(
            task=rollout.task,
            submitter=rollout.submitter,
            source=summary.best_kernel,
            origin=Kernel.Origin.ROLLOUT,
            metadata={"rollout_id": rollout.pk, "turn": summary.best_turn, "model": rollout.model},
        )
    except InvalidInput as exc:
        return None, None, f"the best kernel could not be stored: {exc}"
    evaluation = Evaluation.objects.create(
        kernel=kernel,
        track=config.get("track", Evaluation.Track.STRICT),
        device=config.get("device", django_settings.EVAL_DEVICE),
        status=Evaluation.Status.RUNNING,
        started=timezone.now(),
        attempts=1,
    )
    # its review flags are stored with it (the hooks of evaluation_store_result)
    evaluation = evaluation_store_result(
        evaluation_id=evaluation.pk, result=EvalResult.from_dict(summary.best_evaluation)
    )
    return kernel, evaluation, ""


def rollout_finish(*, rollout_id: int, summary: Any, time_limit_error: str = "") -> Rollout:
    """Write a RolloutSummary onto its row; a passing best kernel goes to the leaderboard. Once only.
    ``time_limit_error``: the loop stopped because the attempt ran out of time (the row fails)."""
    error_kind = ErrorKind.NONE
    if time_limit_error:
        status, error_kind = Rollout.Status.FAILED, ErrorKind.INFRASTRUCTURE
    elif summary.stop_reason == "cancelled":
        status = Rollout.Status.CANCELLED
    elif summary.stop_reason == "llm_error":
        status, error_kind = Rollout.Status.FAILED, ErrorKind.JOB
    else:
        status = Rollout.Status.SUCCEEDED
    with transaction.atomic():
        rollout = Rollout.objects.select_for_update().select_related("task", "submitter").get(pk=rollout_id)
        if rollout.status != Rollout.Status.RUNNING:
            return rollout
        note = ""
        if summary.passed and summary.best_kernel and summary.best_evaluation:
            rollout.best_kernel, rollout.best_evaluation, note = _best_kernel_store(
                rollout=rollout, summary=summary
            )
        data = summary.to_dict()
        data.pop("best_kernel", None)  # stored as a Kernel (and in the summary event)
        rollout.summary = data
        rollout.status = status
        rollout.stop_reason = summary.stop_reason
        rollout.turns = summary.turns
        rollout.evaluations = summary.evaluations
        rollout.prompt_tokens = summary.prompt_tokens
        rollout.completion_tokens = summary.completion_tokens
        rollout.passed = bool(summary.passed)
        rollout.best_speedup = summary.best_speedup
        rollout.best_reward = summary.best_reward
        rollout.error = "\n".join(part for part in (time_limit_error, summary.error, note) if part)
        rollout.error_kind = error_kind
        rollout.finished = timezone.now()
        rollout.save()
        rollout_ring(rollout_id=rollout_id)
    return rollout


def _rollout_execute(ctx: JobContext, api_key: str | None) -> Any:
    from agent import RolloutConfig, run_rollout

    rollout = Rollout.objects.select_related("task", "endpoint").get(pk=ctx.job_id)
    start_seq = selectors.rollout_last_seq(rollout_id=ctx.job_id) + 1  # a re-claimed row continues
    config = RolloutConfig.from_dict(rollout.config)
    client = _client_for(rollout, api_key)
    try:
        return run_rollout(
            rollout.task.source,
            client,
            config=config,
            sink=RolloutEventSink(ctx.job_id),
            cancel=ctx.should_stop,  # a cancel, the time limit, or the row taken from this worker
            rollout_id=str(ctx.job_id),
            start_seq=start_seq,
        )
    finally:
        if hasattr(client, "close"):
            client.close()


def _rollout_store(ctx: JobContext, summary: Any) -> Rollout:
    stopped_by_time = summary.stop_reason == "cancelled" and ctx.past_time_limit() and not ctx.cancel_requested()
    return rollout_finish(
        rollout_id=ctx.job_id, summary=summary, time_limit_error=ctx.time_limit_error() if stopped_by_time else ""
    )


def rollout_run(*, rollout_id: int, api_key: str | None = None) -> Rollout | None:
    """The job: claim the row, run agent.run_rollout with the database sink, store the outcome.

    On webapp.core.runner: idempotent (a second delivery finds the row claimed or finished and does
    nothing), retried when the database goes away; anything else ends the rollout ``failed`` with an
    ``error`` event in its stream. The key comes from the endpoint's environment variable;
    ``api_key`` only serves job messages queued before endpoints were registered (they carried the key).
    """
    return job_run(
        ROLLOUT_JOB,
        rollout_id,
        execute=lambda ctx: _rollout_execute(ctx, api_key),
        store=_rollout_store,
        before_fail=lambda ctx, error: rollout_error_event(rollout_id=ctx.job_id, error=error),
    )


ROLLOUT_JOB = JobKind(
    name="rollout",
    model=Rollout,
    task="webapp.rollouts.tasks.rollout_run_task",
    ring=lambda rollout_id: rollout_ring(rollout_id=rollout_id),
    time_limit_s=conf.soft_time_limit_s,
    cancelled_fields={"stop_reason": "cancelled"},
)


def _client_for(rollout: Rollout, api_key: str | None) -> Any:
    """The rollout's model: its registered endpoint where it is now (its key from the endpoint's
    environment variable), or a local Hugging Face directory (an exported checkpoint)."""
    if rollout.endpoint is None and rollout.base_url.startswith(LOCAL_MODEL_SCHEME):
        import torch

        from agent import TransformersChatClient

        device = "cuda" if torch.cuda.is_available() else "cpu"
        return TransformersChatClient.from_pretrained(rollout.base_url[len(LOCAL_MODEL_SCHEME) :], device=device)
    from agent import OpenAIChatClient

    return OpenAIChatClient(
        rollout.endpoint.base_url if rollout.endpoint else rollout.base_url,
        rollout.model,
        api_key=api_key or llm_endpoint_api_key(endpoint=rollout.endpoint),
        timeout_s=conf.llm_timeout_s(),
        max_retries=conf.llm_max_retries(),
    )


BUILTIN_ENDPOINT = "builtin-scripted"


def llm_endpoint_builtin_start(*, port: int = 0) -> LlmEndpoint:
    """Serve the built-in scripted policy on loopback from this process and register it as the
    endpoint ``builtin-scripted`` (no key). Its rollouts must run where this process's loopback is
    reachable: the embedded worker of ``make demo``, or the inline backend of the tests."""
    from .builtin_policy import MODEL_NAME, builtin_policy_serve

    server = builtin_policy_serve(port)
    return llm_endpoint_register(
        name=BUILTIN_ENDPOINT,
        base_url=server.url,
        model=MODEL_NAME,
        description="KernelCourt's scripted policy (no model, no key): it verifies and submits a real "
        "kernel for the task, so a first rollout shows a whole trajectory.",
        builtin=True,
    )
