"""Server-rendered pages: parse the query, call selectors, render. Templates autoescape everything."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from webapp.core.permissions import visible_error

from . import charts, selectors
from .models import Evaluation, Kernel, Submitter, Task


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def _slice_params(request: HttpRequest) -> dict:
    track = request.GET.get("track") or "strict"
    if track not in Evaluation.Track.values:
        track = "strict"
    return {
        "track": track,
        "suite": request.GET.get("suite") or None,
        "level": _int_or_none(request.GET.get("level")),
        "hardware": request.GET.get("hardware") or None,
    }


SORTABLE = [
    ("submitter", "Submitter"),
    ("tasks_attempted", "Attempted"),
    ("pass_rate", "Pass rate"),
    ("fast_1_eager", "fast₁ vs eager"),
    ("fast_1_compile", "fast₁ vs compile"),
    ("geomean_speedup_eager", "Geomean vs eager (correct)"),
    ("geomean_speedup_eager_all", "Geomean vs eager (fail = 1×)"),
    ("geomean_speedup_compile", "Geomean vs compile (correct)"),
    ("geomean_speedup_compile_all", "Geomean vs compile (fail = 1×)"),
    ("hacks_flagged", "Hacks flagged"),
]


def leaderboard(request: HttpRequest) -> HttpResponse:
    params = _slice_params(request)
    sort = request.GET.get("sort") or selectors.DEFAULT_SORT
    hardware, rows, entries = selectors.leaderboard_rows(
        track=params["track"],
        hardware_key=params["hardware"],
        suite=params["suite"],
        level=params["level"],
        sort=sort,
    )
    link_params = {**params, "hardware": hardware.key if hardware else params["hardware"]}
    return render(
        request,
        "arena/leaderboard.html",
        {
            "params": params,
            "link_params": link_params,
            "sort": sort,
            "sortable": SORTABLE,
            "hardware": hardware,
            "hardware_choices": selectors.hardware_list(),
            "choices": selectors.leaderboard_filter_choices(),
            "rows": rows,
            "charts": charts.leaderboard_charts(entries) if entries else [],
        },
    )


def entries(request: HttpRequest) -> HttpResponse:
    """The kernels behind one leaderboard figure: a submitter's best evaluation per task in a slice."""
    params = _slice_params(request)
    figure = request.GET.get("figure") or "attempted"
    try:
        submitter = selectors.submitter_get(name=request.GET.get("submitter", ""))
    except Submitter.DoesNotExist as exc:
        raise Http404("no such submitter") from exc
    hardware = selectors.leaderboard_hardware(track=params["track"], key=params["hardware"])
    rows = selectors.leaderboard_entries(
        track=params["track"],
        hardware_id=hardware.pk if hardware else None,
        suite=params["suite"],
        level=params["level"],
        submitter_id=submitter.pk,
    )
    return render(
        request,
        "arena/entries.html",
        {
            "params": params,
            "submitter": submitter,
            "hardware": hardware,
            "figure": figure,
            "figures": selectors.FIGURES,
            "entries": [e for e in rows if e.in_figure(figure)],
        },
    )


def task_list(request: HttpRequest) -> HttpResponse:
    suite = request.GET.get("suite") or None
    level = _int_or_none(request.GET.get("level"))
    count, page, page_size, tasks = selectors.page_slice(
        selectors.task_list(suite=suite, level=level, q=request.GET.get("q") or None),
        page=_int_or_none(request.GET.get("page")) or 1,
        page_size=100,
    )
    return render(
        request,
        "arena/task_list.html",
        {
            "tasks": tasks,
            "count": count,
            "page": page,
            "has_next": page * page_size < count,
            "params": {"suite": suite, "level": level, "q": request.GET.get("q") or None},
            "choices": selectors.leaderboard_filter_choices(),
        },
    )


def task_detail(request: HttpRequest, task_id: int) -> HttpResponse:
    try:
        task = selectors.task_get(task_id=task_id)
    except Task.DoesNotExist as exc:
        raise Http404("no such task") from exc
    params = _slice_params(request)
    hardware = selectors.leaderboard_hardware(track=params["track"], key=params["hardware"])
    best = selectors.leaderboard_entries(
        track=params["track"], hardware_id=hardware.pk if hardware else None, task_id=task.pk
    )
    best.sort(key=lambda e: (not e.passed, -(e.speedup_eager or 0), e.submitter_name))
    return render(
        request,
        "arena/task_detail.html",
        {
            "task": task,
            "params": params,
            "hardware": hardware,
            "hardware_choices": selectors.hardware_list(),
            "best": best,
            "kernel_count": selectors.kernel_list(task_id=task.pk).count(),
        },
    )


def kernel_detail(request: HttpRequest, kernel_id: int) -> HttpResponse:
    try:
        kernel = selectors.kernel_detail(kernel_id=kernel_id)
    except Kernel.DoesNotExist as exc:
        raise Http404("no such kernel") from exc
    evaluations = list(kernel.evaluations.all())
    for evaluation in evaluations:  # an evaluator's traceback: its requester (no paths) and staff
        evaluation.shown_error = visible_error(
            evaluation.error, user=request.user, owner_id=evaluation.requested_by_id
        )
    return render(
        request,
        "arena/kernel_detail.html",
        {
            "kernel": kernel,
            "evaluations": evaluations,
            "in_progress": any(not e.is_finished for e in evaluations),
            "review_enabled": selectors.review_enabled(),
        },
    )


def submitter_detail(request: HttpRequest, name: str) -> HttpResponse:
    try:
        submitter = selectors.submitter_get(name=name)
    except Submitter.DoesNotExist as exc:
        raise Http404("no such submitter") from exc
    return render(
        request,
        "arena/submitter_detail.html",
        {
            "submitter": submitter,
            "summaries": selectors.submitter_summaries(submitter_id=submitter.pk),
            "kernels": selectors.submitter_kernels(submitter_id=submitter.pk),
        },
    )
