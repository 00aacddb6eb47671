"""The review API (mounted under /api/review/): flags, verdicts, rules, and the reviewed-kernel export.

Every endpoint needs a signed-in user (bearer token or session); verdicts, rules and the export need
the ``review.decide`` permission.
"""

from __future__ import annotations

import json
from datetime import datetime

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field, Router, Schema, Status
from ninja.errors import HttpError

from webapp.accounts.auth import ApiTokenAuth, SignedInSessionAuth
from webapp.core.paging import page_slice
from webapp.core.text import LongText, ShortText, Text

from . import selectors, services
from .models import Flag, ReviewerRule

router = Router(tags=["review"])
AUTH = [ApiTokenAuth(), SignedInSessionAuth()]


class ErrorOut(Schema):
    detail: str


class FlagIn(Schema):
    kernel_id: int
    reason: Text(5000)
    evaluation_id: int | None = None


class FlagOut(Schema):
    id: int
    kernel_id: int
    evaluation_id: int | None
    source: str
    reason: str
    family: str
    rule_id: int | None
    created_by: str | None
    created: datetime

    @staticmethod
    def resolve_created_by(obj: Flag) -> str | None:
        return obj.created_by.get_username() if obj.created_by else None


class FlagPage(Schema):
    count: int
    page: int
    page_size: int
    items: list[FlagOut]


class VerdictIn(Schema):
    case_id: int | None = None
    kernel_id: int | None = None
    verdict: Text(32)
    family: Text(64) = ""
    notes: LongText = ""
    evidence_lines: list[int] = Field(default_factory=list, max_length=10_000)


class VerdictOut(Schema):
    id: int
    case_id: int
    kernel_id: int
    reviewer: str
    verdict: str
    family: str
    notes: str
    evidence_lines: list[int]
    case_status: str
    agreement: str


class RuleIn(Schema):
    name: Text(64)
    kind: Text(32)
    severity: Text(32) = "reject"
    message: Text(500) = ""
    pattern: Text(5000) = ""
    dynamic_check: Text(128) = ""
    family: Text(64) = ""
    track: Text(16) = "both"
    source_case_id: int | None = None


class RuleOut(Schema):
    id: int
    name: str
    kind: str
    pattern: str
    dynamic_check: str
    severity: str
    message: str
    family: str
    track: str
    status: str
    source_case_id: int | None
    published: datetime | None


class PublishOut(Schema):
    rule_id: int
    versions: list[str]
    scanned: int
    matched_kernel_ids: list[int]
    new_flag_ids: list[int]
    relabelled: int


def _reviewer(request: HttpRequest) -> None:
    if not selectors.user_can_decide(request.user):
        raise HttpError(403, "only reviewers (permission review.decide) can do this")


@router.get("/flags", response=FlagPage, auth=AUTH)
def flags(
    request: HttpRequest,
    kernel_id: int | None = None,
    source: ShortText | None = None,
    page: int = 1,
    page_size: int = 50,
):
    count, page, page_size, items = page_slice(
        selectors.flag_list(kernel_id=kernel_id, source=source), page=page, page_size=page_size
    )
    return {"count": count, "page": page, "page_size": page_size, "items": items}


@router.post("/flags", response={201: FlagOut, 422: ErrorOut}, auth=AUTH)
def flag_create(request: HttpRequest, body: FlagIn):
    try:
        flag = services.flag_create(
            kernel_id=body.kernel_id, user=request.user, reason=body.reason, evaluation_id=body.evaluation_id
        )
    except services.InvalidReview as exc:
        return Status(422, {"detail": str(exc)})
    return Status(201, selectors.flag_list().get(pk=flag.pk))


@router.post("/verdicts", response={201: VerdictOut, 403: ErrorOut, 422: ErrorOut}, auth=AUTH)
def verdict_create(request: HttpRequest, body: VerdictIn):
    _reviewer(request)
    case_id = body.case_id
    if case_id is None and body.kernel_id is not None:
        case = selectors.case_for_kernel(kernel_id=body.kernel_id)
        case_id = case.pk if case else None
    if case_id is None:
        return Status(422, {"detail": "give case_id, or the kernel_id of a kernel under review"})
    try:
        verdict = services.verdict_submit(
            case_id=case_id,
            reviewer=request.user,
            verdict=body.verdict,
            family=body.family,
            notes=body.notes,
            evidence_lines=body.evidence_lines,
        )
    except PermissionDenied as exc:
        return Status(403, {"detail": str(exc)})
    except services.InvalidReview as exc:
        return Status(422, {"detail": str(exc)})
    case = selectors.case_focus(case_id=case_id)
    return Status(
        201,
        {
            "id": verdict.pk,
            "case_id": case.pk,
            "kernel_id": case.kernel_id,
            "reviewer": request.user.get_username(),
            "verdict": verdict.verdict,
            "family": verdict.family,
            "notes": verdict.notes,
            "evidence_lines": verdict.evidence_lines,
            "case_status": case.status,
            "agreement": selectors.case_agreement(case).label,
        },
    )


@router.get("/rules", response=list[RuleOut], auth=AUTH)
def rules(request: HttpRequest, status: ShortText | None = None):
    _reviewer(request)
    return list(selectors.rule_list(status=status)[:500])


@router.post("/rules", response={201: RuleOut, 422: ErrorOut}, auth=AUTH)
def rule_create(request: HttpRequest, body: RuleIn):
    _reviewer(request)
    try:
        rule = services.rule_create(user=request.user, **body.dict())
    except services.InvalidReview as exc:
        return Status(422, {"detail": str(exc)})
    return Status(201, rule)


@router.post("/rules/{rule_id}/publish", response={200: PublishOut, 404: ErrorOut, 422: ErrorOut}, auth=AUTH)
def rule_publish(request: HttpRequest, rule_id: int):
    _reviewer(request)
    if not ReviewerRule.objects.filter(pk=rule_id).exists():
        return Status(404, {"detail": f"no rule {rule_id}"})
    try:
        report = services.rule_publish(rule_id=rule_id, user=request.user)
    except services.InvalidReview as exc:
        return Status(422, {"detail": str(exc)})
    return Status(200, report)


@router.get("/rule-set/{track}", auth=AUTH)
def rule_set(request: HttpRequest, track: str):
    """The active rule set of a track, exactly as gpu_workers receives it."""
    if track not in ("strict", "open"):
        raise HttpError(404, "track is strict or open")
    return selectors.active_rule_set(track)


@router.get("/export.jsonl", auth=AUTH)
def export(request: HttpRequest, include_open: bool = False):
    """Reviewed kernels as JSON lines (source, task, verdict, family, evidence, notes), streamed."""
    _reviewer(request)
    rows = selectors.reviewed_kernels_export(include_open=include_open)
    response = StreamingHttpResponse(
        (json.dumps(row, ensure_ascii=False) + "\n" for row in rows), content_type="application/x-ndjson"
    )
    response["Content-Disposition"] = 'attachment; filename="reviewed-kernels.jsonl"'
    return response
