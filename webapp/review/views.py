"""Review pages: the queue, the one-at-a-time focus view, flags, rules, the checker's quality, the audit log.

Views parse input, call one service or selector, and render; everything a kernel wrote is autoescaped.
"""

from __future__ import annotations

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.arena.models import Kernel
from webapp.core.paging import page_of

from . import selectors, services
from .models import FAMILY_CHOICES, ReviewCase, ReviewerRule


def reviewer_required(view):
    @login_required
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs):
        if not selectors.user_can_decide(request.user):
            raise PermissionDenied("only reviewers can see this page")
        return view(request, *args, **kwargs)

    return wrapper


def _int_or_none(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


@reviewer_required
def queue(request: HttpRequest) -> HttpResponse:
    page = page_of(selectors.case_list(status=ReviewCase.Status.OPEN), request=request, size=50)
    mine = selectors.case_queue(user=request.user).count()
    rows = [(case, selectors.case_agreement(case)) for case in page.items]
    return render(
        request,
        "review/queue.html",
        {"rows": rows, "page": page, "mine": mine, "summary": selectors.agreement_summary()},
    )


@reviewer_required
def next_case(request: HttpRequest) -> HttpResponse:
    case = selectors.case_next(user=request.user, after=_int_or_none(request.GET.get("after")))
    if case is None:
        messages.info(request, "Nothing left in your queue.")
        return redirect("review:queue")
    return redirect("review:case", case_id=case.pk)


@reviewer_required
def case_detail(request: HttpRequest, case_id: int) -> HttpResponse:
    try:
        case = selectors.case_focus(case_id=case_id)
    except ReviewCase.DoesNotExist as exc:
        raise Http404("no such review case") from exc
    verdicts = list(case.verdicts.all())
    mine = next((v for v in verdicts if v.reviewer_id == request.user.pk), None)
    evidence = {line for v in verdicts for line in v.evidence_lines or []}
    kernel = case.kernel
    source_lines = [(n, line, n in evidence) for n, line in enumerate(kernel.source.splitlines(), start=1)]
    return render(
        request,
        "review/case.html",
        {
            "case": case,
            "kernel": kernel,
            "source_lines": source_lines,
            "evaluations": list(kernel.evaluations.all()),
            "flags": list(kernel.review_flags.all()),
            "verdicts": verdicts,
            "mine": mine,
            "agreement": selectors.case_agreement(case),
            "trajectory_url": selectors.trajectory_url(kernel),
            "families": FAMILY_CHOICES,
            "family_names": {str(f["family"]): f["name"] for f in _families()},
        },
    )


def _families():
    from .judge import families

    return families()


@require_POST
@reviewer_required
def verdict(request: HttpRequest, case_id: int) -> HttpResponse:
    try:
        services.verdict_submit(
            case_id=case_id,
            reviewer=request.user,
            verdict=request.POST.get("verdict", ""),
            family=request.POST.get("family", ""),
            notes=request.POST.get("notes", ""),
            evidence_lines=request.POST.get("evidence_lines", ""),
        )
    except services.InvalidReview as exc:
        messages.error(request, str(exc))
        return redirect("review:case", case_id=case_id)
    messages.success(request, f"Verdict on case {case_id} saved.")
    return redirect(f"{reverse('review:next')}?after={case_id}")


@require_POST
def flag_kernel(request: HttpRequest, kernel_id: int) -> HttpResponse:
    if not request.user.is_authenticated:  # back to the kernel page after signing in, not to this POST
        return redirect_to_login(reverse("arena:kernel_detail", args=[kernel_id]))
    if not Kernel.objects.filter(pk=kernel_id).exists():
        raise Http404("no such kernel")
    try:
        services.flag_create(kernel_id=kernel_id, user=request.user, reason=request.POST.get("reason", ""))
    except services.InvalidReview as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, "Thanks: the kernel is in the review queue.")
    return redirect("arena:kernel_detail", kernel_id=kernel_id)


@reviewer_required
def rule_new(request: HttpRequest, case_id: int | None = None) -> HttpResponse:
    from gpu_workers.rules import DYNAMIC_CHECKS

    case = None
    if case_id is not None:
        try:
            case = selectors.case_focus(case_id=case_id)
        except ReviewCase.DoesNotExist as exc:
            raise Http404("no such review case") from exc
    values = {
        "kind": "regex",
        "severity": "reject",
        "track": "both",
        "family": case.family if case else "",
        "name": "",
        "pattern": "",
        "message": "",
        "dynamic_check": "",
    }
    if case is not None and not request.POST:
        lines = sorted({n for v in case.verdicts.all() for n in v.evidence_lines or []})
        source_lines = case.kernel.source.splitlines()
        if lines and lines[0] <= len(source_lines):
            import re

            values["pattern"] = re.escape(source_lines[lines[0] - 1].strip()).replace("\\ ", " ")
    if request.method == "POST":
        values.update({k: request.POST.get(k, "") for k in values})
        try:
            rule = services.rule_create(user=request.user, source_case_id=case.pk if case else None, **values)
        except services.InvalidReview as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Rule {rule.name} saved as a draft; publish it to apply it.")
            return redirect("review:rules")
    return render(
        request,
        "review/rule_new.html",
        {
            "case": case,
            "values": values,
            "kinds": ReviewerRule.Kind.values,
            "tracks": ReviewerRule.Track.values,
            "dynamic_checks": sorted(DYNAMIC_CHECKS),
            "families": FAMILY_CHOICES,
        },
    )


@reviewer_required
def rules(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "review/rules.html",
        {
            "page": page_of(selectors.rule_list(), request=request, size=100),
            "versions": selectors.rule_set_versions(),
        },
    )


@require_POST
@reviewer_required
def rule_publish(request: HttpRequest, rule_id: int) -> HttpResponse:
    try:
        report = services.rule_publish(rule_id=rule_id, user=request.user)
    except ReviewerRule.DoesNotExist as exc:
        raise Http404("no such rule") from exc
    except services.InvalidReview as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"Published as {', '.join(report.versions)}: scanned {report.scanned} kernels, "
            f"{len(report.matched_kernel_ids)} match, {len(report.new_flag_ids)} newly queued for review.",
        )
    return redirect("review:rules")


@reviewer_required
def checker(request: HttpRequest) -> HttpResponse:
    track = request.GET.get("track") if request.GET.get("track") in ("strict", "open") else "strict"
    return render(
        request,
        "review/checker.html",
        {
            "track": track,
            "metrics": selectors.checker_metrics(track=track),
            "regression": services.regression_run(),
            "summary": selectors.agreement_summary(),
        },
    )


@reviewer_required
def audit(request: HttpRequest) -> HttpResponse:
    kernel_id = _int_or_none(request.GET.get("kernel"))
    return render(
        request,
        "review/audit.html",
        {
            "page": page_of(selectors.audit_list(kernel_id=kernel_id), request=request, size=100),
            "kernel_id": kernel_id,
        },
    )
