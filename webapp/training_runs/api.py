"""The training API (django-ninja, mounted at /api/training): launch, list, detail, metrics,
samples, cancel, a checkpoint onto the leaderboard. Writes need a Bearer token."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Status
from ninja.errors import HttpError

from webapp.accounts.auth import ApiTokenAuth, OptionalApiTokenAuth
from webapp.core.paging import page_slice
from webapp.core.text import ShortText

from . import conf, selectors, services
from .models import TrainingRun
from .schemas import (
    CheckpointLeaderboardIn,
    CheckpointLeaderboardOut,
    ErrorOut,
    MetricPage,
    RegistryOut,
    SampleList,
    TrainingLaunchIn,
    TrainingLaunchOut,
    TrainingRunDetailOut,
    TrainingRunOut,
    TrainingRunPage,
)

router = Router(tags=["training"])
auth = ApiTokenAuth()
reader = OptionalApiTokenAuth()  # anyone reads; a token says who asks (errors are the owner's)


@router.get("/registry", response=RegistryOut)
def registry(request: HttpRequest):
    """The task sets and base models a launch may name (staff register them in the admin)."""
    return selectors.training_registry()


@router.post("/", response={202: TrainingLaunchOut, 422: ErrorOut, 429: ErrorOut}, auth=auth)
def launch(request: HttpRequest, payload: TrainingLaunchIn):
    """Launch a training run (queued; runs on the ``gpu`` queue)."""
    if (payload.recipe is None) == (payload.config is None):
        return Status(422, {"detail": "give exactly one of recipe or config"})
    try:
        config = payload.config
        if payload.recipe is not None:
            try:
                config = selectors.training_recipe_config(recipe=payload.recipe)
            except KeyError:
                names = ", ".join(selectors.training_recipe_names())
                return Status(422, {"detail": f"no recipe {payload.recipe!r}; choose one of {names}"})
        run = services.training_run_launch(
            name=payload.name,
            config=config,
            created_by=request.user,
            recipe=payload.recipe or "",
            base_model=payload.base_model,
            task_set=payload.task_set,
            overrides=payload.overrides,
        )
    except services.InvalidInput as exc:
        return Status(422, {"detail": str(exc)})
    run.refresh_from_db(fields=["status"])
    return Status(
        202,
        {
            "id": run.pk,
            "status": run.status,
            "config_hash": run.config_hash,
            "stream": f"/ws/training/{run.pk}/?after_step=0",
        },
    )


@router.get("/", response=TrainingRunPage, auth=reader)
def runs(request: HttpRequest, status: ShortText | None = None, page: int = 1, page_size: int = 50):
    count, page, page_size, items = page_slice(
        selectors.training_run_list(status=status), page=page, page_size=page_size
    )
    return {"count": count, "page": page, "page_size": page_size, "items": items}


@router.get("/{run_id}", response=TrainingRunDetailOut, auth=reader)
def run(request: HttpRequest, run_id: int):
    try:
        found = selectors.training_run_get(run_id=run_id)
    except TrainingRun.DoesNotExist as exc:
        raise HttpError(404, f"no training run {run_id}") from exc
    found.checkpoint_list = [
        selectors.training_checkpoint_payload(c) for c in selectors.training_checkpoints(run_id=run_id)
    ]
    return found


@router.get("/{run_id}/metrics", response=MetricPage)
def metrics(request: HttpRequest, run_id: int, after_step: int = 0, limit: int = 200):
    """Per-step metrics with step > after_step (at most ``limit``, capped); continue with
    ``next_after_step`` while ``has_more``."""
    state = selectors.training_run_state(run_id=run_id)
    if state is None:
        raise HttpError(404, f"no training run {run_id}")
    limit = max(1, min(limit, conf.METRICS_PAGE_MAX))
    rows = selectors.training_metrics_after(run_id=run_id, after_step=after_step, limit=limit + 1)
    has_more = len(rows) > limit
    rows = rows[:limit]
    return {
        "run_id": run_id,
        "status": state["status"],
        "finished": state["finished"],
        "items": [selectors.training_metric_payload(r) for r in rows],
        "next_after_step": rows[-1].step if rows else max(after_step, 0),
        "has_more": has_more,
    }


@router.get("/{run_id}/samples", response=SampleList)
def samples(request: HttpRequest, run_id: int, step: int | None = None):
    """The sampled trajectories of one step (default: the newest step that has some)."""
    if not selectors.training_run_exists(run_id=run_id):
        raise HttpError(404, f"no training run {run_id}")
    if step is None:
        step = selectors.training_last_sample_step(run_id=run_id)
    items = [] if step is None else selectors.training_samples(run_id=run_id, step=step)
    return {"run_id": run_id, "step": step, "items": [selectors.training_sample_payload(s) for s in items]}


@router.post("/{run_id}/cancel", response={200: TrainingRunOut, 403: ErrorOut, 404: ErrorOut}, auth=auth)
def cancel(request: HttpRequest, run_id: int):
    """Cancel a run (its owner or staff)."""
    try:
        return services.training_run_cancel(run_id=run_id, user=request.user)
    except TrainingRun.DoesNotExist:
        return Status(404, {"detail": f"no training run {run_id}"})


@router.post(
    "/{run_id}/checkpoints/{step}/leaderboard",
    response={202: CheckpointLeaderboardOut, 422: ErrorOut},
    auth=auth,
)
def checkpoint_leaderboard(request: HttpRequest, run_id: int, step: int, payload: CheckpointLeaderboardIn):
    """Evaluate a checkpoint on a suite through the agent; its passing kernels enter the leaderboard
    as the checkpoint's submitter (rollouts queued on the ``agent`` queue)."""
    try:
        batch = services.training_checkpoint_leaderboard(
            run_id=run_id, step=step, suite=payload.suite, level=payload.level, settings=payload.settings,
            created_by=request.user,
        )
    except services.InvalidInput as exc:
        return Status(422, {"detail": str(exc)})
    return Status(202, {"batch_id": batch.pk, "submitter": batch.submitter.name, "rollouts": batch.rollouts.count()})
