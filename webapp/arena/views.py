"""Server-rendered pages: parse the query, call selectors, render. Templates autoescape everything."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from webapp.core.paging import page_of, page_slice
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


# (sort key, column title, what the figure means: shown as the column's tooltip and in the legend)
COLUMNS = [
    ("submitter", "Submitter", "who submitted the kernels: a model, an agent, a checkpoint or a person"),
    ("tasks_attempted", "Attempted", "tasks with at least one verdict; hacks and rejected kernels count"),
    ("pass_rate", "Pass rate", "share of attempted tasks whose best kernel is correct and not a hack"),
    ("fast_1_compile", "fast₁ vs compile", "share of attempted tasks with a correct kernel more than 1× "
     "faster than torch.compile: the first ranked figure"),
    ("fast_1_eager", "fast₁ vs eager", "share of attempted tasks with a correct kernel more than 1× faster "
     "than eager PyTorch"),
    ("geomean_speedup_eager", "Geomean vs eager (correct)", "geometric mean speedup vs eager over correct "
     "kernels only, with its measured spread"),
    ("geomean_speedup_eager_all", "Geomean vs eager (all; failed = 1×)", "geometric mean over every "
     "attempted task, a failed task counted as 1× (it falls back to eager); – when no task passed"),
    ("geomean_speedup_compile", "Geomean vs compile (correct)", "geometric mean speedup vs torch.compile "
     "over correct kernels with a compile measurement"),
    ("geomean_speedup_compile_all", "Geomean vs compile (all; failed = 1×)", "geometric mean vs "
     "torch.compile over every attempted task, a failed task counted as 1×; – when no task passed"),
    ("hacks_flagged", "Hacks", "kernels the evaluator rejected for gaming the measurement, or that review "
     "confirmed as hacks (they count as attempted and failed)"),
    ("not_custom", "Not custom", "kernels rejected on the strict track because library compute ran "
     "(an honest PyTorch rewrite, not a hack): failed tasks"),
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
            "columns": COLUMNS,
            "rank_order_text": selectors.RANK_ORDER_TEXT,
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
        hardware_key=hardware.key if hardware else None,
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
    count, page, page_size, tasks = page_slice(
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
        track=params["track"],
        hardware_id=hardware.pk if hardware else None,
        task_id=task.pk,
        hardware_key=hardware.key if hardware else None,
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
            "charts": charts.task_best_speedups(best),
        },
    )


def kernel_detail(request: HttpRequest, kernel_id: int) -> HttpResponse:
    try:
        kernel = selectors.kernel_detail(kernel_id=kernel_id, with_evaluations=False)
    except Kernel.DoesNotExist as exc:
        raise Http404("no such kernel") from exc
    page = page_of(selectors.kernel_evaluations(kernel_id=kernel.pk), request=request, size=20)
    evaluations = [(ev, selectors.evaluation_reward(ev)) for ev in page.items]
    for evaluation, _ in evaluations:  # an evaluator's traceback: its requester (no paths) and staff
        evaluation.shown_error = visible_error(
            evaluation.error, user=request.user, owner_id=evaluation.requested_by_id
        )
    return render(
        request,
        "arena/kernel_detail.html",
        {
            "kernel": kernel,
            "evaluations": evaluations,
            "page": page,
            "in_progress": any(not ev.is_finished for ev, _ in evaluations),
            "review_enabled": selectors.review_enabled(),
            "charts": charts.kernel_timings(page.items),
        },
    )


def submitter_detail(request: HttpRequest, name: str) -> HttpResponse:
    try:
        submitter = selectors.submitter_get(name=name)
    except Submitter.DoesNotExist as exc:
        raise Http404("no such submitter") from exc
    slices = selectors.submitter_slices(submitter_id=submitter.pk)
    return render(
        request,
        "arena/submitter_detail.html",
        {
            "submitter": submitter,
            "summaries": [row for row, _ in slices],
            "page": page_of(selectors.submitter_kernels(submitter_id=submitter.pk), request=request, size=50),
            "charts": charts.submitter_tasks([(f"{row.track} · {row.hardware}", e) for row, e in slices]),
        },
    )
