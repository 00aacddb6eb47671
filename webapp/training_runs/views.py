"""Training pages: the list and the live run page. Views parse, call one selector or service, and
render; everything the model wrote is escaped (templates autoescape; the page's JavaScript only
ever sets textContent). Launching is in the admin and the API."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.core.paging import page_slice
from webapp.core.permissions import NotAllowed, can_manage, visible_error

from . import conf, selectors, services
from .models import TrainingRun


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def run_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status") or None
    count, page, page_size, runs = page_slice(
        selectors.training_run_list(status=status),
        page=_int_or_none(request.GET.get("page")) or 1,
        page_size=100,
    )
    return render(
        request,
        "training_runs/list.html",
        {
            "runs": runs,
            "count": count,
            "page": page,
            "has_next": page * page_size < count,
            "status": status,
            "statuses": TrainingRun.Status.values,
        },
    )


def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    try:
        run = selectors.training_run_get(run_id=run_id)
    except TrainingRun.DoesNotExist as exc:
        raise Http404("no such training run") from exc
    metrics = [
        selectors.training_metric_payload(m)
        for m in selectors.training_metrics_after(run_id=run.pk, after_step=0, limit=conf.PAGE_METRICS_MAX)
    ]
    return render(
        request,
        "training_runs/detail.html",
        {
            "run": run,
            "run_error": visible_error(run.error, user=request.user, owner_id=run.created_by_id),
            "can_cancel": can_manage(request.user, run.created_by_id),
            "metrics": metrics,
            "last_step": metrics[-1]["step"] if metrics else 0,
            "checkpoints": selectors.training_checkpoints(run_id=run.pk),
        },
    )


@require_POST
@login_required
def cancel(request: HttpRequest, run_id: int) -> HttpResponse:
    try:
        services.training_run_cancel(run_id=run_id, user=request.user)
    except TrainingRun.DoesNotExist as exc:
        raise Http404("no such training run") from exc
    except NotAllowed as exc:
        raise PermissionDenied(str(exc)) from exc
    messages.info(request, "Cancellation requested; the run checkpoints and stops before its next step.")
    return redirect("training_runs:detail", run_id=run_id)
