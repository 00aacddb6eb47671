"""The arena's JSON API (django-ninja): tasks, kernels, evaluations, leaderboard, submit, import."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.shortcuts import get_object_or_404
from ninja import File, Form, Router, Status, UploadedFile
from ninja.errors import HttpError

from webapp.accounts.auth import ApiTokenAuth, OptionalApiTokenAuth
from webapp.core.paging import page_slice
from webapp.core.permissions import NotAllowed
from webapp.core.text import Name, ShortText, Text

from . import importers, selectors, services
from .models import Evaluation, Kernel, Submitter, Task
from .schemas import (
    ErrorOut,
    EvaluationDetailOut,
    EvaluationPage,
    HardwareOut,
    ImportKernelbenchIn,
    ImportReportOut,
    KernelDetailOut,
    KernelPage,
    KernelSubmitIn,
    KernelSubmitOut,
    LeaderboardEntryOut,
    LeaderboardOut,
    SubmitterDetailOut,
    SubmitterMemberIn,
    SubmitterPage,
    SubmitterUpdateIn,
    TaskDetailOut,
    TaskPage,
)

router = Router(tags=["arena"])
auth = ApiTokenAuth()
reader = OptionalApiTokenAuth()  # anyone reads; a token says who asks (an evaluator error is the requester's)


def _page(qs, page: int, page_size: int) -> dict:
    count, page, page_size, items = page_slice(qs, page=page, page_size=page_size)
    return {"count": count, "page": page, "page_size": page_size, "items": items}


@router.get("/tasks", response=TaskPage)
def tasks(
    request: HttpRequest,
    suite: ShortText | None = None,
    level: int | None = None,
    q: ShortText | None = None,
    page: int = 1,
    page_size: int = 50,
):
    return _page(selectors.task_list(suite=suite, level=level, q=q), page, page_size)


@router.get("/tasks/{task_id}", response=TaskDetailOut)
def task(request: HttpRequest, task_id: int):
    return get_object_or_404(Task, pk=task_id)


@router.get("/kernels", response=KernelPage)
def kernels(
    request: HttpRequest,
    task_id: int | None = None,
    submitter: ShortText | None = None,
    origin: ShortText | None = None,
    page: int = 1,
    page_size: int = 50,
):
    return _page(selectors.kernel_list(task_id=task_id, submitter=submitter, origin=origin), page, page_size)


@router.get("/kernels/{kernel_id}", response=KernelDetailOut, auth=reader)
def kernel(request: HttpRequest, kernel_id: int):
    try:
        return selectors.kernel_detail(kernel_id=kernel_id)
    except Kernel.DoesNotExist as exc:
        raise HttpError(404, f"no kernel {kernel_id}") from exc


@router.post(
    "/kernels",
    response={
        202: KernelSubmitOut,
        403: ErrorOut,
        404: ErrorOut,
        409: ErrorOut,
        413: ErrorOut,
        422: ErrorOut,
        429: ErrorOut,
    },
    auth=auth,
)
def kernel_submit(request: HttpRequest, payload: KernelSubmitIn):
    size = len(payload.source.encode("utf-8"))
    limit = settings.KERNEL_SOURCE_MAX_BYTES
    if size > limit:
        return Status(413, {"detail": f"kernel source is {size} bytes; the limit is {limit} bytes"})
    if payload.task_id is None and not payload.task:
        return Status(422, {"detail": "give task_id, or task (a task name) with suite"})
    task = selectors.task_find(task_id=payload.task_id, suite=payload.suite, name=payload.task)
    if task is None:
        return Status(
            404, {"detail": f"no task {payload.task_id if payload.task_id is not None else payload.task!r}"}
        )
    try:
        kernel, evaluation = services.kernel_submit(
            task=task,
            submitter_name=payload.submitter,
            submitter_kind=payload.submitter_kind,
            source=payload.source,
            track=payload.track,
            origin=Kernel.Origin.API,
            metadata={"submitted_by": request.user.get_username()},
            user=request.user,
        )
    except services.Conflict as exc:
        return Status(409, {"detail": str(exc)})
    except services.InvalidInput as exc:
        return Status(422, {"detail": str(exc)})
    return Status(
        202,
        {
            "kernel_id": kernel.pk,
            "evaluation_id": evaluation.pk,
            "status": evaluation.status,
            "poll": f"/api/evaluations/{evaluation.pk}",
        },
    )


@router.get("/submitters", response=SubmitterPage)
def submitters(request: HttpRequest, kind: ShortText | None = None, page: int = 1, page_size: int = 50):
    return _page(selectors.submitter_list(kind=kind), page, page_size)


def _submitter_detail(name: str) -> Submitter:
    try:
        return Submitter.objects.select_related("created_by").prefetch_related("members").get(name=name)
    except Submitter.DoesNotExist as exc:
        raise HttpError(404, f"no submitter {name!r}") from exc


@router.get("/submitters/{name}", response=SubmitterDetailOut)
def submitter(request: HttpRequest, name: str):
    return _submitter_detail(name)


@router.patch("/submitters/{name}", response={200: SubmitterDetailOut, 403: ErrorOut}, auth=auth)
def submitter_update(request: HttpRequest, name: str, payload: SubmitterUpdateIn):
    """Replace a submitter's metadata (its creator, its members or staff)."""
    _submitter_detail(name)
    services.submitter_update(name=name, user=request.user, metadata=payload.metadata)
    return _submitter_detail(name)


@router.post(
    "/submitters/{name}/members", response={200: SubmitterDetailOut, 403: ErrorOut, 422: ErrorOut}, auth=auth
)
def submitter_member_add(request: HttpRequest, name: str, payload: SubmitterMemberIn):
    """Let another user post under a submitter (staff only)."""
    _submitter_detail(name)
    try:
        services.submitter_member_add(name=name, username=payload.username, by=request.user)
    except services.InvalidInput as exc:
        return Status(422, {"detail": str(exc)})
    return _submitter_detail(name)


@router.delete("/submitters/{name}/members/{username}", response={200: SubmitterDetailOut}, auth=auth)
def submitter_member_remove(request: HttpRequest, name: str, username: str):
    _submitter_detail(name)
    services.submitter_member_remove(name=name, username=username, by=request.user)
    return _submitter_detail(name)


@router.get("/hardware", response=list[HardwareOut])
def hardware(request: HttpRequest):
    return selectors.hardware_list()


@router.get("/evaluations", response=EvaluationPage, auth=reader)
def evaluations(
    request: HttpRequest,
    kernel_id: int | None = None,
    task_id: int | None = None,
    status: ShortText | None = None,
    track: ShortText | None = None,
    hardware: ShortText | None = None,
    submitter: ShortText | None = None,
    page: int = 1,
    page_size: int = 50,
):
    qs = selectors.evaluation_list(
        kernel_id=kernel_id,
        status=status,
        track=track,
        hardware=hardware,
        submitter=submitter,
        task_id=task_id,
    )
    return _page(qs, page, page_size)


@router.get("/evaluations/{evaluation_id}", response=EvaluationDetailOut, auth=reader)
def evaluation(request: HttpRequest, evaluation_id: int):
    try:
        return selectors.evaluation_get(evaluation_id=evaluation_id)
    except Evaluation.DoesNotExist as exc:
        raise HttpError(404, f"no evaluation {evaluation_id}") from exc


@router.get("/leaderboard", response=LeaderboardOut)
def leaderboard(
    request: HttpRequest,
    track: ShortText = "strict",
    suite: ShortText | None = None,
    level: int | None = None,
    hardware: ShortText | None = None,
    sort: ShortText = selectors.DEFAULT_SORT,
):
    if track not in Evaluation.Track.values:
        raise HttpError(422, f"track must be one of {', '.join(Evaluation.Track.values)}")
    chosen, rows, _ = selectors.leaderboard_rows(
        track=track, hardware_key=hardware, suite=suite, level=level, sort=sort
    )
    if hardware and chosen is None:
        raise HttpError(404, f"no hardware {hardware!r}")
    return {
        "rank_order": list(selectors.RANK_ORDER),
        "rank_order_text": selectors.RANK_ORDER_TEXT,
        "track": track,
        "suite": suite,
        "level": level,
        "hardware": chosen.key if chosen else None,
        "rows": [r.to_dict() for r in rows],
    }


@router.get("/leaderboard/entries", response=list[LeaderboardEntryOut])
def leaderboard_entries(
    request: HttpRequest,
    submitter: ShortText,
    figure: ShortText = "attempted",
    track: ShortText = "strict",
    suite: ShortText | None = None,
    level: int | None = None,
    hardware: ShortText | None = None,
):
    """The best evaluation per task behind one figure of a leaderboard row (``figure``: one of
    attempted, passed, failed, fast_1_eager, fast_1_compile, hacks, not_custom)."""
    if figure not in selectors.FIGURES:
        raise HttpError(422, f"figure must be one of {', '.join(selectors.FIGURES)}")
    try:
        found = selectors.submitter_get(name=submitter)
    except Submitter.DoesNotExist as exc:
        raise HttpError(404, f"no submitter {submitter!r}") from exc
    chosen = selectors.leaderboard_hardware(track=track, key=hardware)
    entries = selectors.leaderboard_entries(
        track=track,
        hardware_id=chosen.pk if chosen else None,
        suite=suite,
        level=level,
        submitter_id=found.pk,
        hardware_key=chosen.key if chosen else None,
    )
    return [
        {
            "submitter": e.submitter_name,
            "task_id": e.task_id,
            "task": e.task_name,
            "suite": e.suite,
            "level": e.task_level,
            "status": e.status,
            "passed": e.passed,
            "speedup_eager": e.speedup_eager,
            "speedup_compile": e.speedup_compile,
            "evaluation_id": e.evaluation_id,
            "kernel_id": e.kernel_id,
            "evaluations": e.evaluations,
            "hacked": e.hacked,
            "confirmed_hack": e.confirmed_hack,
            "not_custom": e.not_custom,
            **e.reward.to_dict(),
        }
        for e in entries
        if e.in_figure(figure)
    ]


# --- imports (token auth) --------------------------------------------------------------------------


def _upload_lines(upload: UploadedFile) -> list[str]:
    if upload.size and upload.size > settings.IMPORT_FILE_MAX_BYTES:
        raise HttpError(
            413, f"the file is {upload.size} bytes; the limit is {settings.IMPORT_FILE_MAX_BYTES} bytes"
        )
    try:
        return upload.read().decode("utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise HttpError(422, "the file must be UTF-8 JSONL") from exc


def _staff(request: HttpRequest, why: str) -> None:
    if not request.user.is_staff:
        raise NotAllowed(f"{why} needs a staff user's token")


@router.post("/import/suite", response=ImportReportOut, auth=auth)
def import_suite(request: HttpRequest):
    _staff(request, "importing tasks (shared by every submitter)")
    return importers.tasks_import_suite().to_dict()


@router.post("/import/training-tasks", response=ImportReportOut, auth=auth)
def import_training_tasks(
    request: HttpRequest, file: UploadedFile = File(...), suite: Text(64) = Form("training")
):
    _staff(request, "importing tasks (shared by every submitter)")
    rows = importers._jsonl_rows(_upload_lines(file))
    return importers.tasks_import_training_rows(rows=rows, suite=suite, where=file.name or "").to_dict()


@router.post("/import/kernels", response=ImportReportOut, auth=auth)
def import_kernels(
    request: HttpRequest,
    file: UploadedFile = File(...),
    submitter: Name = Form(...),
    suite: Text(64) = Form("kernelbench"),
    track: Text(16) = Form("strict"),
):
    """Kernel rows under a submitter you may use; one submission per file, one queued evaluation
    per row (rate limit and queue cap)."""
    if track not in Evaluation.Track.values:
        raise HttpError(422, f"track must be one of {', '.join(Evaluation.Track.values)}")
    rows = importers._jsonl_rows(_upload_lines(file))
    try:
        report = importers.kernels_import_rows(
            submitter_name=submitter,
            rows=rows,
            suite=suite,
            track=track,
            where=(file.name or "")[:255],
            user=request.user,
        )
    except services.InvalidInput as exc:
        raise HttpError(422, str(exc)) from exc
    return report.to_dict()


@router.post("/import/kernelbench", response=ImportReportOut, auth=auth)
def import_kernelbench(request: HttpRequest, payload: ImportKernelbenchIn):
    _staff(request, "importing from a server path")
    try:
        return importers.tasks_import_kernelbench(path=payload.path).to_dict()
    except services.InvalidInput as exc:
        raise HttpError(422, str(exc)) from exc
