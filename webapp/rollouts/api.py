"""The rollouts API (django-ninja, mounted at /api/rollouts): launch, list, detail, events, cancel."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Status
from ninja.errors import HttpError

from webapp.accounts.auth import ApiTokenAuth, OptionalApiTokenAuth
from webapp.core.paging import page_slice
from webapp.core.text import ShortText

from . import conf, selectors, services
from .models import Rollout
from .schemas import (
    ErrorOut,
    LlmEndpointOut,
    RolloutDetailOut,
    RolloutEventPage,
    RolloutLaunchIn,
    RolloutLaunchOut,
    RolloutOut,
    RolloutPage,
)

router = Router(tags=["rollouts"])
auth = ApiTokenAuth()
reader = OptionalApiTokenAuth()  # anyone reads; a token says who asks (errors are the owner's)


def _get(rollout_id: int) -> Rollout:
    try:
        return selectors.rollout_get(rollout_id=rollout_id)
    except Rollout.DoesNotExist as exc:
        raise HttpError(404, f"no rollout {rollout_id}") from exc


@router.get("/endpoints", response=list[LlmEndpointOut])
def endpoints(request: HttpRequest):
    """The LLM endpoints a rollout may use (registered by staff)."""
    return list(selectors.llm_endpoint_list()[:200])


@router.post(
    "/",
    response={
        202: RolloutLaunchOut,
        403: ErrorOut,
        404: ErrorOut,
        409: ErrorOut,
        422: ErrorOut,
        429: ErrorOut,
    },
    auth=auth,
)
def launch(request: HttpRequest, payload: RolloutLaunchIn):
    """Launch a rollout of one task (``task_id``) or of every task of a ``suite``, asking a registered
    LLM endpoint."""
    if (payload.task_id is None) == (not payload.suite):
        return Status(422, {"detail": "give exactly one of task_id or suite"})
    common = dict(
        submitter_name=payload.submitter,
        submitter_kind=payload.submitter_kind,
        endpoint=payload.endpoint,
        settings=payload.settings,
        created_by=request.user,
    )
    try:
        if payload.task_id is not None:
            if not selectors.task_exists(task_id=payload.task_id):
                return Status(404, {"detail": f"no task {payload.task_id}"})
            rollouts = [services.rollout_launch(task_id=payload.task_id, **common)]
            batch_id = None
        else:
            batch = services.rollout_launch_suite(suite=payload.suite, level=payload.level, **common)
            rollouts = list(batch.rollouts.order_by("id"))
            batch_id = batch.pk
    except services.Conflict as exc:
        return Status(409, {"detail": str(exc)})
    except services.InvalidInput as exc:
        return Status(422, {"detail": str(exc)})
    return Status(
        202,
        {
            "rollout_ids": [r.pk for r in rollouts],
            "batch_id": batch_id,
            "status": Rollout.Status.QUEUED,
            "stream": [f"/ws/rollouts/{r.pk}/?after_seq=-1" for r in rollouts],
        },
    )


@router.get("/", response=RolloutPage, auth=reader)
def rollouts(
    request: HttpRequest,
    status: ShortText | None = None,
    task_id: int | None = None,
    submitter: ShortText | None = None,
    batch_id: int | None = None,
    page: int = 1,
    page_size: int = 50,
):
    qs = selectors.rollout_list(status=status, task_id=task_id, submitter=submitter, batch_id=batch_id)
    count, page, page_size, items = page_slice(qs, page=page, page_size=page_size)
    return {"count": count, "page": page, "page_size": page_size, "items": items}


@router.get("/{rollout_id}", response=RolloutDetailOut, auth=reader)
def rollout(request: HttpRequest, rollout_id: int):
    found = _get(rollout_id)
    found.candidates = selectors.rollout_candidates(rollout_id=found.pk)
    return found


@router.get("/{rollout_id}/events", response=RolloutEventPage, auth=reader)
def events(request: HttpRequest, rollout_id: int, after_seq: int = -1, limit: int = 100):
    """Stored events with seq > after_seq (at most ``limit``, capped); continue with ``next_after_seq``."""
    state = selectors.rollout_state(rollout_id=rollout_id)
    if state is None:
        raise HttpError(404, f"no rollout {rollout_id}")
    limit = max(1, min(limit, conf.EVENTS_PAGE_MAX))
    rows = selectors.rollout_events_after(rollout_id=rollout_id, after_seq=after_seq, limit=limit + 1)
    has_more = len(rows) > limit
    rows = rows[:limit]
    visible = any(r.kind == "error" for r in rows) and selectors.rollout_errors_visible(
        rollout_id=rollout_id, viewer=request.user
    )
    return {
        "rollout_id": rollout_id,
        "status": state["status"],
        "finished": state["finished"],
        "items": [selectors.rollout_event_payload(r, errors_visible=visible) for r in rows],
        "next_after_seq": rows[-1].seq if rows else max(after_seq, -1),
        "has_more": has_more,
    }


@router.post("/{rollout_id}/cancel", response={200: RolloutOut, 403: ErrorOut, 404: ErrorOut}, auth=auth)
def cancel(request: HttpRequest, rollout_id: int):
    """Cancel a rollout (its owner or staff)."""
    try:
        return services.rollout_cancel(rollout_id=rollout_id, user=request.user)
    except Rollout.DoesNotExist:
        return Status(404, {"detail": f"no rollout {rollout_id}"})
