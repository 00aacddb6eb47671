"""Rollout pages: the launch form, the list, and the live page. Views parse, call one service or
selector, and render; everything the model wrote is escaped (templates autoescape; the page's
JavaScript only ever sets textContent)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from webapp.accounts.services import LimitExceeded
from webapp.core.paging import page_slice
from webapp.core.permissions import NotAllowed, can_manage, visible_error

from . import selectors, services
from .forms import RolloutLaunchForm
from .models import Rollout


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


@login_required
def launch(request: HttpRequest) -> HttpResponse:
    form = RolloutLaunchForm(request.POST or None, initial={"task": _int_or_none(request.GET.get("task"))})
    status = 200
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        common = dict(
            submitter_name=data["submitter"],
            endpoint=data["endpoint"].name,
            settings=form.launch_settings(),
            created_by=request.user,
        )
        try:
            if data.get("task"):
                rollout = services.rollout_launch(task_id=data["task"].pk, **common)
                return redirect("rollouts:detail", rollout_id=rollout.pk)
            batch = services.rollout_launch_suite(suite=data["suite"], **common)
            messages.success(request, f"Launched {batch.rollouts.count()} rollouts on suite {batch.suite}.")
            return redirect(f"{_list_url()}?batch={batch.pk}")
        except (services.InvalidInput, NotAllowed) as exc:
            form.add_error(None, str(exc))
            status = 403 if isinstance(exc, NotAllowed) else 400
        except LimitExceeded as exc:
            form.add_error(None, str(exc))
            status = 429
    if form.errors and status == 200:
        status = 400
    return render(request, "rollouts/launch.html", {"form": form}, status=status)


def _list_url() -> str:
    from django.urls import reverse

    return reverse("rollouts:list")


def rollout_list(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status") or None
    batch_id = _int_or_none(request.GET.get("batch"))
    count, page, page_size, rollouts = page_slice(
        selectors.rollout_list(
            status=status, batch_id=batch_id, submitter=request.GET.get("submitter") or None
        ),
        page=_int_or_none(request.GET.get("page")) or 1,
        page_size=100,
    )
    return render(
        request,
        "rollouts/list.html",
        {
            "rollouts": rollouts,
            "count": count,
            "page": page,
            "has_next": page * page_size < count,
            "status": status,
            "batch_id": batch_id,
            "statuses": Rollout.Status.values,
        },
    )


def rollout_detail(request: HttpRequest, rollout_id: int) -> HttpResponse:
    try:
        rollout = selectors.rollout_get(rollout_id=rollout_id)
    except Rollout.DoesNotExist as exc:
        raise Http404("no such rollout") from exc
    return render(
        request,
        "rollouts/detail.html",
        {
            "rollout": rollout,
            "rollout_error": visible_error(rollout.error, user=request.user, owner_id=rollout.created_by_id),
            "can_cancel": can_manage(request.user, rollout.created_by_id),
            "config": rollout.config,
            "candidates": selectors.rollout_candidates(rollout_id=rollout.pk),
        },
    )


@require_POST
@login_required
def cancel(request: HttpRequest, rollout_id: int) -> HttpResponse:
    try:
        services.rollout_cancel(rollout_id=rollout_id, user=request.user)
    except Rollout.DoesNotExist as exc:
        raise Http404("no such rollout") from exc
    except NotAllowed as exc:
        raise PermissionDenied(str(exc)) from exc
    messages.info(request, "Cancellation requested; the rollout stops before its next turn.")
    return redirect("rollouts:detail", rollout_id=rollout_id)
