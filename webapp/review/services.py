"""Writes of the review app: flags, verdicts and their consequences, reviewer rules, the LLM judge."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from webapp.arena.models import Evaluation, Kernel
from webapp.core.text import text_problem

from . import conf, judge, selectors
from .models import AuditEntry, Flag, ReviewCase, ReviewerRule, RewardRelabel, RuleSetVersion, Verdict


class InvalidReview(ValueError):
    """Input the review app cannot accept; the message says why (shown as is)."""


def _audit(
    *, actor: Any, action: str, kernel_id: int | None = None, case: ReviewCase | None = None, **details: Any
) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor if actor is not None and getattr(actor, "is_authenticated", False) else None,
        action=action,
        kernel_id=kernel_id,
        case=case,
        details=details,
    )


def _require_reviewer(user: Any) -> None:
    if not selectors.user_can_decide(user):
        raise PermissionDenied("only reviewers (permission review.decide) can do this")


def case_ensure(*, kernel_id: int) -> ReviewCase:
    """The kernel's review case, created open on its first flag (race-safe via the one-to-one)."""
    case, _ = ReviewCase.objects.get_or_create(
        kernel_id=kernel_id, defaults={"required_reviewers": conf.reviewers_per_item()}
    )
    return case


# --- flags ---------------------------------------------------------------------------------------


def _flag_auto(
    *,
    kernel_id: int,
    evaluation_id: int | None,
    source: str,
    dedup_key: str,
    reason: str,
    family: Any = None,
    rule: ReviewerRule | None = None,
    rule_set_version: RuleSetVersion | None = None,
) -> Flag | None:
    """Store an automatic flag once (the unique constraint makes retries harmless); None if it existed."""
    flag, created = Flag.objects.get_or_create(
        kernel_id=kernel_id,
        source=source,
        dedup_key=dedup_key[:255],
        defaults={
            "evaluation_id": evaluation_id,
            "reason": reason,
            "family": str(family) if family not in (None, "") else "",
            "rule": rule,
            "rule_set_version": rule_set_version,
        },
    )
    return flag if created else None


def flags_from_evaluation(*, evaluation_id: int) -> list[Flag]:
    """Flags for a stored evaluation: its ``review`` findings, floor findings and extreme speedups.

    Call after storing a result (``evaluation_store_result``). Idempotent: calling it again creates
    nothing new. Returns every automatic flag of this evaluation.
    """
    evaluation = Evaluation.objects.only(
        "id", "kernel_id", "status", "correct", "findings", "speedup_eager"
    ).get(pk=evaluation_id)
    wanted: list[tuple[str, str, str, Any]] = []  # (source, key, reason, family)
    for index, finding in enumerate(evaluation.findings or []):
        rule = str(finding.get("rule", ""))
        severity = finding.get("severity")
        message = str(finding.get("message", ""))
        if rule == "impossible_speed":
            wanted.append(
                (
                    Flag.Source.ROOFLINE,
                    f"ev{evaluation_id}:roofline",
                    f"{severity}: {message}",
                    finding.get("family"),
                )
            )
        elif rule == "extreme_speedup" and severity == "review":
            wanted.append(
                (
                    Flag.Source.EXTREME_SPEEDUP,
                    f"ev{evaluation_id}:extreme_speedup",
                    message,
                    finding.get("family"),
                )
            )
        elif severity == "review":
            wanted.append(
                (
                    Flag.Source.EVALUATOR_REVIEW,
                    f"ev{evaluation_id}:{rule}:{index}",
                    f"{rule}: {message}",
                    finding.get("family"),
                )
            )
    threshold = conf.extreme_speedup()
    speedup = evaluation.speedup_eager
    if evaluation.status == Evaluation.Status.PASSED and speedup is not None and speedup > threshold:
        wanted.append(
            (
                Flag.Source.EXTREME_SPEEDUP,
                f"ev{evaluation_id}:extreme_speedup",
                f"{speedup:.1f}× faster than eager (review line: {threshold:g}×)",
                18,
            )
        )
    with transaction.atomic():
        confirmed = ReviewCase.objects.filter(
            kernel_id=evaluation.kernel_id, status=ReviewCase.Status.HACK
        ).first()
        if confirmed is not None:  # a new evaluation of a confirmed hack: its reward is relabelled too
            _relabel_kernel(
                kernel_id=evaluation.kernel_id,
                reason=RewardRelabel.Reason.VERDICT,
                actor=None,
                case=confirmed,
            )
        if not wanted:
            return []
        case_ensure(kernel_id=evaluation.kernel_id)
        for source, key, reason, family in wanted:
            flag = _flag_auto(
                kernel_id=evaluation.kernel_id,
                evaluation_id=evaluation_id,
                source=source,
                dedup_key=key,
                reason=reason,
                family=family,
            )
            if flag is not None:
                _audit(
                    actor=None,
                    action=AuditEntry.Action.FLAG,
                    kernel_id=evaluation.kernel_id,
                    flag=flag.pk,
                    source=source,
                    evaluation=evaluation_id,
                )
    return list(Flag.objects.filter(evaluation_id=evaluation_id).order_by("id"))


def _text_check(value: str, *, what: str, max_length: int) -> None:
    problem = text_problem(value, max_length=max_length)
    if problem:
        raise InvalidReview(f"{what} {problem}")


def flag_create(*, kernel_id: int, user: Any, reason: str, evaluation_id: int | None = None) -> Flag:
    """A signed-in person flags a kernel ("flag this kernel")."""
    if user is None or not user.is_authenticated:
        raise PermissionDenied("sign in to flag a kernel")
    reason = (reason or "").strip()
    if not reason:
        raise InvalidReview("say why this kernel looks wrong")
    _text_check(reason, what="the reason", max_length=5000)
    if not Kernel.objects.filter(pk=kernel_id).exists():
        raise InvalidReview(f"no kernel {kernel_id}")
    if (
        evaluation_id is not None
        and not Evaluation.objects.filter(pk=evaluation_id, kernel_id=kernel_id).exists()
    ):
        raise InvalidReview(f"evaluation {evaluation_id} is not an evaluation of kernel {kernel_id}")
    with transaction.atomic():
        case = case_ensure(kernel_id=kernel_id)
        flag = Flag.objects.create(
            kernel_id=kernel_id,
            evaluation_id=evaluation_id,
            source=Flag.Source.USER,
            reason=reason,
            created_by=user,
        )
        _audit(
            actor=user,
            action=AuditEntry.Action.FLAG,
            kernel_id=kernel_id,
            case=case,
            flag=flag.pk,
            source=Flag.Source.USER,
            reason=reason,
        )
    return flag


# --- verdicts and what a decision does -----------------------------------------------------------


def _evidence(lines: Any, *, source: str) -> list[int]:
    if lines in (None, ""):
        return []
    if isinstance(lines, str):
        parts = [p for p in re.split(r"[,\s]+", lines.strip()) if p]
        out: list[int] = []
        for part in parts:
            if re.fullmatch(r"\d+-\d+", part):
                lo, hi = (int(x) for x in part.split("-"))
                if hi < lo or hi - lo > 500:
                    raise InvalidReview(f"bad line range {part!r}")
                out.extend(range(lo, hi + 1))
            elif part.isdigit():
                out.append(int(part))
            else:
                raise InvalidReview(f"evidence lines are numbers or ranges like 12-14, not {part!r}")
        lines = out
    try:
        numbers = sorted({int(n) for n in lines})
    except (TypeError, ValueError):
        raise InvalidReview("evidence lines must be line numbers") from None
    last = source.count("\n") + 1
    bad = [n for n in numbers if n < 1 or n > last]
    if bad:
        raise InvalidReview(f"evidence lines {bad} are outside the source (1–{last})")
    return numbers


def _family(value: Any) -> str:
    value = "" if value is None else str(value).strip()
    if value and value != "other" and not (value.isdigit() and 1 <= int(value) <= 18):
        raise InvalidReview("the hack family is 1–18 or 'other'")
    return value


def _reward_floor(evaluation: Evaluation) -> float:
    from gpu_workers.reward import resolve_reward_config

    try:
        config = resolve_reward_config(evaluation.reward_config_name or None)
    except ValueError:
        config = resolve_reward_config(None)
    return float(config.get("floor", 0.0))


def _relabel_kernel(
    *,
    kernel_id: int,
    reason: str,
    actor: Any,
    case: ReviewCase | None = None,
    rule: ReviewerRule | None = None,
) -> int:
    """Relabel every finished evaluation of the kernel to its config's floor (once each)."""
    made = 0
    evaluations = (
        Evaluation.objects.filter(kernel_id=kernel_id)
        .exclude(status__in=[Evaluation.Status.QUEUED, Evaluation.Status.RUNNING])
        .only("id", "reward", "reward_config_name")
    )
    for evaluation in evaluations:
        relabel, created = RewardRelabel.objects.get_or_create(
            evaluation=evaluation,
            defaults={
                "kernel_id": kernel_id,
                "old_reward": evaluation.reward,
                "new_reward": _reward_floor(evaluation),
                "reason": reason,
                "case": case,
                "rule": rule,
            },
        )
        if created:
            made += 1
            _audit(
                actor=actor,
                action=AuditEntry.Action.RELABEL,
                kernel_id=kernel_id,
                case=case,
                evaluation=evaluation.pk,
                old_reward=relabel.old_reward,
                new_reward=relabel.new_reward,
                reason=reason,
            )
    return made


def _majority_family(verdicts: list[Verdict]) -> str:
    counts = Counter(v.family for v in verdicts if v.verdict == Verdict.Choice.HACK and v.family)
    if not counts:
        return "other"
    return sorted(counts.items(), key=lambda kv: (-kv[1], selectors._family_order(kv[0])))[0][0]


def verdict_submit(
    *,
    case_id: int,
    reviewer: Any,
    verdict: str,
    family: Any = "",
    notes: str = "",
    evidence_lines: Any = None,
) -> Verdict:
    """A reviewer's verdict (revisable while the case is open); decides the case on a strict majority
    of its required reviewers. A confirmed hack is hidden and its rewards relabelled to the floor."""
    _require_reviewer(reviewer)
    if verdict not in Verdict.Choice.values:
        raise InvalidReview("the verdict is hack, legit or unsure")
    _text_check(notes or "", what="the notes", max_length=20_000)
    family = _family(family)
    if verdict == Verdict.Choice.HACK and not family:
        family = "other"
    if verdict != Verdict.Choice.HACK:
        family = ""
    with transaction.atomic():
        try:
            case = ReviewCase.objects.select_for_update().select_related("kernel").get(pk=case_id)
        except ReviewCase.DoesNotExist:
            raise InvalidReview(f"no review case {case_id}") from None
        if case.status != ReviewCase.Status.OPEN:
            raise InvalidReview(f"case {case_id} is already decided ({case.status})")
        lines = _evidence(evidence_lines, source=case.kernel.source)
        row, _ = Verdict.objects.update_or_create(
            case=case,
            reviewer=reviewer,
            defaults={
                "verdict": verdict,
                "family": family,
                "notes": (notes or "").strip(),
                "evidence_lines": lines,
            },
        )
        _audit(
            actor=reviewer,
            action=AuditEntry.Action.VERDICT,
            kernel_id=case.kernel_id,
            case=case,
            verdict=verdict,
            family=family,
            evidence_lines=lines,
            notes=row.notes,
        )
        verdicts = list(case.verdicts.all())
        needed = case.required_reviewers // 2 + 1
        counts = Counter(v.verdict for v in verdicts)
        outcome = None
        if counts[Verdict.Choice.HACK] >= needed:
            outcome = ReviewCase.Status.HACK
        elif counts[Verdict.Choice.LEGIT] >= needed:
            outcome = ReviewCase.Status.LEGIT
        if outcome is not None:
            case.status = outcome
            case.family = _majority_family(verdicts) if outcome == ReviewCase.Status.HACK else ""
            case.decided = timezone.now()
            case.save(update_fields=["status", "family", "decided"])
            _audit(
                actor=reviewer,
                action=AuditEntry.Action.DECIDE,
                kernel_id=case.kernel_id,
                case=case,
                status=outcome,
                family=case.family,
                counts=dict(counts),
            )
            if outcome == ReviewCase.Status.HACK:
                _relabel_kernel(
                    kernel_id=case.kernel_id, reason=RewardRelabel.Reason.VERDICT, actor=reviewer, case=case
                )
            else:
                # reviewers overrule a rule's match: the kernel is shown again and keeps its reward
                RewardRelabel.objects.filter(
                    kernel_id=case.kernel_id, reason=RewardRelabel.Reason.RULE
                ).delete()
    return row


# --- reviewer rules ------------------------------------------------------------------------------


def rule_create(
    *,
    user: Any,
    name: str,
    kind: str,
    severity: str = "reject",
    message: str = "",
    pattern: str = "",
    dynamic_check: str = "",
    family: Any = "",
    track: str = "both",
    source_case_id: int | None = None,
) -> ReviewerRule:
    """A draft reviewer rule; a static one must match the hack it came from (or it catches nothing)."""
    from gpu_workers.rules import DYNAMIC_CHECKS, static_scan, validate_rule_set

    _require_reviewer(user)
    name = (name or "").strip()
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]{1,63}", name):
        raise InvalidReview("a rule name is 2–64 lowercase letters, digits, '-' or '_'")
    if ReviewerRule.objects.filter(name=name).exists():
        raise InvalidReview(f"a rule named {name!r} exists")
    if kind not in ReviewerRule.Kind.values:
        raise InvalidReview(f"kind must be one of {', '.join(ReviewerRule.Kind.values)}")
    if severity not in ("reject", "review"):
        raise InvalidReview("severity is reject or review")
    if track not in ReviewerRule.Track.values:
        raise InvalidReview("track is both, strict or open")
    family = _family(family)
    _text_check(message or "", what="the message", max_length=500)
    _text_check(pattern or "", what="the pattern", max_length=5000)
    message = (message or "").strip() or f"matches reviewer rule {name}"
    case = None
    if source_case_id is not None:
        case = ReviewCase.objects.select_related("kernel").filter(pk=source_case_id).first()
        if case is None:
            raise InvalidReview(f"no review case {source_case_id}")
    rule = ReviewerRule(
        name=name,
        kind=kind,
        severity=severity,
        message=message[:500],
        family=family,
        track=track,
        source_case=case,
        created_by=user,
    )
    if kind == ReviewerRule.Kind.DYNAMIC:
        if dynamic_check not in DYNAMIC_CHECKS:
            raise InvalidReview(
                f"unknown dynamic check {dynamic_check!r}; known: {', '.join(sorted(DYNAMIC_CHECKS))}"
            )
        rule.dynamic_check = dynamic_check
    else:
        if not pattern:
            raise InvalidReview("a static rule needs a pattern")
        rule.pattern = pattern
        try:
            validate_rule_set({"track": "strict", "static": [selectors.rule_as_static(rule)]})
        except ValueError as exc:
            raise InvalidReview(str(exc)) from None
        if case is not None and not static_scan(
            case.kernel.source, {"static": [selectors.rule_as_static(rule)]}
        ):
            raise InvalidReview(f"the pattern does not match kernel {case.kernel_id}, the hack it comes from")
    with transaction.atomic():
        rule.save()
        _audit(
            actor=user,
            action=AuditEntry.Action.RULE_CREATE,
            kernel_id=case.kernel_id if case else None,
            case=case,
            rule=rule.pk,
            name=name,
            kind=kind,
            pattern=rule.pattern,
            dynamic_check=rule.dynamic_check,
            severity=severity,
            track=track,
        )
    return rule


@dataclass
class PublishReport:
    rule_id: int
    versions: list[str]
    scanned: int = 0
    matched_kernel_ids: list[int] = field(default_factory=list)
    new_flag_ids: list[int] = field(default_factory=list)
    relabelled: int = 0


def _tracks_of(rule: ReviewerRule) -> list[str]:
    return ["strict", "open"] if rule.track == ReviewerRule.Track.BOTH else [rule.track]


def rule_publish(*, rule_id: int, user: Any) -> PublishReport:
    """Publish a rule: a new RuleSetVersion per track it applies to, then re-check every stored kernel
    with ``static_scan`` (no execution) and queue new matches for review (``rule`` flags). Kernels a
    ``reject`` rule matches are hidden and relabelled until reviewers call them legit."""
    from gpu_workers.rules import static_scan

    _require_reviewer(user)
    with transaction.atomic():
        rule = ReviewerRule.objects.select_for_update().get(pk=rule_id)
        if rule.status == ReviewerRule.Status.PUBLISHED:
            raise InvalidReview(f"rule {rule.name} is already published")
        rule.status = ReviewerRule.Status.PUBLISHED
        rule.published = timezone.now()
        rule.save(update_fields=["status", "published"])
        versions: list[RuleSetVersion] = []
        for track in _tracks_of(rule):
            last = RuleSetVersion.objects.select_for_update().filter(track=track).order_by("-number").first()
            number = (last.number if last else 0) + 1
            rules = selectors.published_rules(track=track)
            rule_set = selectors.rule_set_compose(track=track, number=number, rules=rules)
            version = RuleSetVersion.objects.create(
                track=track,
                number=number,
                version=rule_set["version"],
                base_version=rule_set["base_version"],
                rule_set=rule_set,
                created_by=user,
            )
            version.rules.set(rules)
            versions.append(version)
        _audit(
            actor=user,
            action=AuditEntry.Action.RULE_PUBLISH,
            case=rule.source_case,
            rule=rule.pk,
            name=rule.name,
            versions=[v.version for v in versions],
        )
        report = PublishReport(rule_id=rule.pk, versions=[v.version for v in versions])
        if rule.kind == ReviewerRule.Kind.DYNAMIC:
            return report  # a dynamic check runs only in new evaluations
        only_this = {"static": [selectors.rule_as_static(rule)]}
        legit = set(
            ReviewCase.objects.filter(status=ReviewCase.Status.LEGIT).values_list("kernel_id", flat=True)
        )
        hacks = set(
            ReviewCase.objects.filter(status=ReviewCase.Status.HACK).values_list("kernel_id", flat=True)
        )
        for kernel_id, source in (
            Kernel.objects.order_by("id").values_list("id", "source").iterator(chunk_size=500)
        ):
            report.scanned += 1
            findings = static_scan(source, only_this)
            if not findings:
                continue
            report.matched_kernel_ids.append(kernel_id)
            flag = _flag_auto(
                kernel_id=kernel_id,
                evaluation_id=None,
                source=Flag.Source.RULE,
                dedup_key=f"rule:{rule.pk}",
                reason=findings[0].message,
                family=rule.family,
                rule=rule,
                rule_set_version=versions[-1],
            )
            if flag is None:
                continue
            report.new_flag_ids.append(flag.pk)
            case = case_ensure(kernel_id=kernel_id)
            _audit(
                actor=user,
                action=AuditEntry.Action.FLAG,
                kernel_id=kernel_id,
                case=case,
                flag=flag.pk,
                source=Flag.Source.RULE,
                rule=rule.pk,
            )
            if rule.severity == "reject" and kernel_id not in legit and kernel_id not in hacks:
                report.relabelled += _relabel_kernel(
                    kernel_id=kernel_id, reason=RewardRelabel.Reason.RULE, actor=user, rule=rule
                )
    return report


# --- the LLM judge -------------------------------------------------------------------------------


def llm_judge_kernel(*, kernel_id: int, client: Any = None) -> judge.JudgeVerdict:
    """Ask the LLM judge about a kernel; a ``hack`` verdict becomes an ``llm_judge`` flag (once per
    kernel source and model). ``client`` is an ``agent.llm`` chat client (default: the configured one)."""
    kernel = Kernel.objects.select_related("task").get(pk=kernel_id)
    evaluation = (
        kernel.evaluations.exclude(status__in=[Evaluation.Status.QUEUED, Evaluation.Status.RUNNING])
        .order_by("-id")
        .first()
    )
    if client is None:
        client = judge.default_client()
    reply = client.complete(
        judge.judge_messages(kernel=kernel, evaluation=evaluation), max_tokens=1024, temperature=0.0
    )
    verdict = judge.parse_verdict(reply.text)
    verdict.model = getattr(client, "model", "") or reply.model
    if verdict.verdict == "hack":
        with transaction.atomic():
            case_ensure(kernel_id=kernel.pk)
            flag = _flag_auto(
                kernel_id=kernel.pk,
                evaluation_id=evaluation.pk if evaluation else None,
                source=Flag.Source.LLM_JUDGE,
                dedup_key=f"judge:{verdict.model}:{kernel.source_hash}",
                reason=json.dumps(verdict.to_dict(), ensure_ascii=False),
                family=verdict.family,
            )
            if flag is not None:
                _audit(
                    actor=None,
                    action=AuditEntry.Action.FLAG,
                    kernel_id=kernel.pk,
                    flag=flag.pk,
                    source=Flag.Source.LLM_JUDGE,
                    model=verdict.model,
                )
                verdict.flag_id = flag.pk
    return verdict


# --- regression: every confirmed hack must be rejected by the current checker --------------------


@dataclass
class RegressionCase:
    case_id: int
    kernel_id: int
    track: str
    family: str
    rejected: bool
    by: list[str]  # the rules (or "evaluation") that reject it


@dataclass
class RegressionReport:
    versions: dict[str, str]
    cases: list[RegressionCase]

    @property
    def not_rejected(self) -> list[int]:
        """Kernel ids of confirmed hacks the checker still lets through (each is a checker bug)."""
        return [c.kernel_id for c in self.cases if not c.rejected]


def regression_run(*, rule_sets: dict[str, dict] | None = None, full: bool = False) -> RegressionReport:
    """Run a checker over every confirmed hack (a service, not a read: with ``full`` it runs the evaluator): ``rule_sets`` by track (default: the active ones).

    Statically always (``static_scan``); with ``full`` also a real ``gpu_workers.evaluate`` under the
    rule set (slow: compiles and runs each kernel). A stored evaluation under the same rule-set
    version that was rejected also counts.
    """
    from gpu_workers.rules import static_scan

    chosen = dict(rule_sets or {})
    for track in ("strict", "open"):
        chosen.setdefault(track, selectors.active_rule_set(track))
    cases = list(
        ReviewCase.objects.filter(status=ReviewCase.Status.HACK).select_related("kernel__task").order_by("id")
    )
    tracks = dict(
        Evaluation.objects.filter(kernel_id__in=[c.kernel_id for c in cases])
        .order_by("kernel_id", "id")
        .values_list("kernel_id", "track")
    )
    rejected_evals = set(
        Evaluation.objects.filter(
            kernel_id__in=[c.kernel_id for c in cases], status=Evaluation.Status.REJECTED
        ).values_list("kernel_id", "track", "rule_set_version")
    )
    out = []
    for case in cases:
        track = tracks.get(case.kernel_id, "strict")
        rule_set = chosen[track]
        by = sorted({f.rule for f in static_scan(case.kernel.source, rule_set) if f.severity == "reject"})
        if (case.kernel_id, track, rule_set["version"]) in rejected_evals:
            by.append("evaluation")
        if full and not by:
            from gpu_workers import EvalRequest, evaluate

            result = evaluate(
                EvalRequest(
                    task_source=case.kernel.task.source,
                    kernel_source=case.kernel.source,
                    device=settings.EVAL_DEVICE,
                    track=track,
                    task_name=case.kernel.task.name,
                    rule_set=rule_set,
                    baselines=("eager",),
                    trials=settings.EVAL_TRIALS,
                )
            )
            if result.status == "rejected":
                by.extend(sorted({f.rule for f in result.rejects}) or ["evaluate"])
        out.append(
            RegressionCase(
                case_id=case.pk,
                kernel_id=case.kernel_id,
                track=track,
                family=case.family or "other",
                rejected=bool(by),
                by=by,
            )
        )
    return RegressionReport(versions={t: rs["version"] for t, rs in chosen.items()}, cases=out)
