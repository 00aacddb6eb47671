"""Reads of the review app: what is hidden, the active rule set, the queue, agreement, checker quality."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Prefetch, Q, QuerySet

from webapp.arena import hooks
from webapp.arena import selectors as arena_selectors
from webapp.arena.models import Evaluation, Kernel

from . import conf
from .models import AuditEntry, Flag, ReviewCase, ReviewerRule, RuleSetVersion, Verdict

# --- what the leaderboard must not show ----------------------------------------------------------


def hidden_kernel_ids(*, track: str | None = None) -> QuerySet:
    """Ids of kernels the leaderboard and listings must leave out, as a subquery (no query of its own).

    Hidden: a confirmed hack (reviewers' majority), or a kernel a published ``reject`` reviewer rule of
    the active rule set matches (for ``track``, when given), unless reviewers have decided it is legit.
    Use: ``qs.exclude(kernel_id__in=hidden_kernel_ids(track=...))`` or ``.exclude(pk__in=...)``.
    """
    rule_match = Q(
        review_flags__source=Flag.Source.RULE,
        review_flags__rule__status=ReviewerRule.Status.PUBLISHED,
        review_flags__rule__severity="reject",
    )
    if track:
        rule_match &= Q(review_flags__rule__track__in=[track, ReviewerRule.Track.BOTH])
    return (
        Kernel.objects.filter(
            Q(review_case__status=ReviewCase.Status.HACK)
            | (rule_match & ~Q(review_case__status=ReviewCase.Status.LEGIT))
        )
        .values("id")
        .distinct()
    )


# --- rule sets -----------------------------------------------------------------------------------


def published_rules(*, track: str) -> list[ReviewerRule]:
    return list(
        ReviewerRule.objects.filter(
            status=ReviewerRule.Status.PUBLISHED, track__in=[track, ReviewerRule.Track.BOTH]
        ).order_by("published", "id")
    )


def rule_as_static(rule: ReviewerRule) -> dict[str, Any]:
    """A static reviewer rule in gpu_workers' rule-set format."""
    return {
        "rule": rule.rule_name,
        "kind": rule.kind,
        "pattern": rule.pattern,
        "severity": rule.severity,
        "message": rule.message,
        "family": int(rule.family) if rule.family.isdigit() else None,
    }


def rule_set_compose(*, track: str, number: int, rules: Iterable[ReviewerRule]) -> dict[str, Any]:
    """``default_rule_set(track)`` plus reviewer rules; version ``<base>+rNNNN`` increases with ``number``."""
    from gpu_workers.rules import default_rule_set, validate_rule_set

    rule_set = default_rule_set(track)
    base = rule_set["version"]
    for rule in rules:
        if rule.kind == ReviewerRule.Kind.DYNAMIC:
            rule_set["dynamic"][rule.dynamic_check] = {"enabled": True, "severity": rule.severity}
        else:
            rule_set["static"].append(rule_as_static(rule))
    rule_set["version"] = f"{base}+r{number:04d}" if number else base
    rule_set["base_version"] = base
    return validate_rule_set(rule_set)


def active_rule_set_version(*, track: str) -> RuleSetVersion | None:
    return RuleSetVersion.objects.filter(track=track).order_by("-number").first()


def active_rule_set(track: str = "strict") -> dict[str, Any]:
    """The rule set new evaluations of ``track`` should pass as ``EvalRequest.rule_set``.

    The newest published RuleSetVersion; if gpu_workers' built-in rules have moved on since it was
    published, the same reviewer rules on top of the new built-ins (same number, newer base).
    Without any published version, ``default_rule_set(track)``.
    """
    from gpu_workers.rules import default_rule_set

    current = active_rule_set_version(track=track)
    if current is None:
        return default_rule_set(track)
    if current.base_version == default_rule_set(track)["version"]:
        return dict(current.rule_set)
    return rule_set_compose(
        track=track, number=current.number, rules=current.rules.order_by("published", "id")
    )


def rule_set_versions(*, track: str | None = None) -> list[RuleSetVersion]:
    qs = RuleSetVersion.objects.all()
    if track:
        qs = qs.filter(track=track)
    return list(qs.order_by("track", "number"))


def rule_list(*, status: str | None = None) -> QuerySet[ReviewerRule]:
    qs = ReviewerRule.objects.select_related("created_by", "source_case")
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-id")


# --- flags, queue, cases -------------------------------------------------------------------------


def flag_list(*, kernel_id: int | None = None, source: str | None = None) -> QuerySet[Flag]:
    qs = Flag.objects.select_related("kernel__task", "created_by", "rule")
    if kernel_id is not None:
        qs = qs.filter(kernel_id=kernel_id)
    if source:
        qs = qs.filter(source=source)
    return qs.order_by("-created", "-id")


def case_queue(*, user: Any) -> QuerySet[ReviewCase]:
    """Open cases this reviewer has not given a verdict on, oldest first."""
    return (
        ReviewCase.objects.filter(status=ReviewCase.Status.OPEN)
        .exclude(verdicts__reviewer=user)
        .select_related("kernel__task", "kernel__submitter")
        .order_by("created", "id")
    )


def case_next(*, user: Any, after: int | None = None) -> ReviewCase | None:
    """The next case for this reviewer after case ``after`` (wrapping round), or None."""
    queue = case_queue(user=user)
    if after is not None:
        later = queue.filter(id__gt=after).order_by("id").first()
        if later is not None:
            return later
        return queue.exclude(id=after).order_by("id").first()
    return queue.first()


def open_case_count() -> int:
    """Cases waiting for a verdict (the queue's length)."""
    return ReviewCase.objects.filter(status=ReviewCase.Status.OPEN).count()


def case_list(*, status: str | None = None) -> QuerySet[ReviewCase]:
    qs = ReviewCase.objects.select_related("kernel__task", "kernel__submitter").prefetch_related(
        Prefetch("verdicts", queryset=Verdict.objects.select_related("reviewer").order_by("id"))
    )
    if status:
        qs = qs.filter(status=status)
    return qs.order_by("-id")


def case_focus(*, case_id: int) -> ReviewCase:
    """One case with everything the focus view shows (a fixed number of queries)."""
    evaluations = Evaluation.objects.select_related("hardware").order_by("-created", "-id")
    return (
        ReviewCase.objects.select_related("kernel__task", "kernel__submitter")
        .prefetch_related(
            Prefetch("kernel__evaluations", queryset=evaluations),
            Prefetch("kernel__review_flags", queryset=Flag.objects.select_related("created_by", "rule")),
            Prefetch("verdicts", queryset=Verdict.objects.select_related("reviewer").order_by("id")),
        )
        .get(pk=case_id)
    )


def case_for_kernel(*, kernel_id: int) -> ReviewCase | None:
    return ReviewCase.objects.filter(kernel_id=kernel_id).first()


def trajectory_url(kernel: Kernel) -> str | None:
    """Where the rollout that produced this kernel is shown, when it came from one (hook for rollouts)."""
    rollout_id = (kernel.metadata or {}).get("rollout_id")
    if kernel.origin != Kernel.Origin.ROLLOUT or rollout_id in (None, ""):
        return None
    from django.urls import NoReverseMatch, reverse

    for name in ("rollouts:rollout_detail", "rollouts:detail", "arena:rollout_detail"):
        try:
            return reverse(name, args=[rollout_id])
        except NoReverseMatch:
            continue
    return None


# --- agreement -----------------------------------------------------------------------------------


@dataclass
class Agreement:
    counts: dict[str, int]
    total: int
    required: int
    majority: str | None  # the most common verdict (None on a tie or without verdicts)
    agreeing: int  # how many gave the most common verdict

    @property
    def share(self) -> float | None:
        return self.agreeing / self.total if self.total else None

    @property
    def label(self) -> str:
        if not self.total:
            return f"0 of {self.required} reviewers"
        top = self.majority or "split"
        return f"{self.agreeing} of {self.total} agree ({top}); {self.required} required"


def agreement_of(verdicts: Iterable[str], *, required: int) -> Agreement:
    counts = Counter(verdicts)
    total = sum(counts.values())
    ranked = counts.most_common()
    agreeing = ranked[0][1] if ranked else 0
    tie = len(ranked) > 1 and ranked[1][1] == agreeing
    majority = ranked[0][0] if ranked and not tie else None
    return Agreement(
        counts={k: counts.get(k, 0) for k in Verdict.Choice.values},
        total=total,
        required=required,
        majority=majority,
        agreeing=agreeing,
    )


def case_agreement(case: ReviewCase) -> Agreement:
    return agreement_of((v.verdict for v in case.verdicts.all()), required=case.required_reviewers)


@dataclass
class AgreementSummary:
    items: int  # cases with at least two verdicts
    observed: float | None  # mean pairwise agreement (Fleiss' P-bar)
    expected: float | None  # chance agreement (Fleiss' P_e)
    kappa: float | None  # Fleiss' kappa over hack / legit / unsure


def agreement_summary() -> AgreementSummary:
    """Inter-reviewer agreement over every case with two or more verdicts (Fleiss, varying raters)."""
    per_case: dict[int, Counter] = {}
    for case_id, verdict in Verdict.objects.values_list("case_id", "verdict").order_by("case_id", "id"):
        per_case.setdefault(case_id, Counter())[verdict] += 1
    rated = [c for c in per_case.values() if sum(c.values()) >= 2]
    if not rated:
        return AgreementSummary(items=0, observed=None, expected=None, kappa=None)
    p_items = []
    totals: Counter = Counter()
    for counts in rated:
        n = sum(counts.values())
        p_items.append(sum(k * (k - 1) for k in counts.values()) / (n * (n - 1)))
        totals.update(counts)
    observed = sum(p_items) / len(p_items)
    all_ratings = sum(totals.values())
    expected = sum((k / all_ratings) ** 2 for k in totals.values())
    kappa = None if expected >= 1.0 else (observed - expected) / (1.0 - expected)
    return AgreementSummary(items=len(rated), observed=observed, expected=expected, kappa=kappa)


# --- rewards -------------------------------------------------------------------------------------


# --- the reward after review (registered with arena: webapp.arena.hooks.RewardReview) -------------

_RELABEL_VALUES = ("new_reward", "reason", "case_id", "rule__name", "created")
_CHANGE_KEYS = ("relabel_reward", "reason", "case_id", "rule", "at")


def _relabel_of_evaluation(evaluation: Evaluation) -> dict[str, Any] | None:
    try:
        relabel = evaluation.reward_relabel  # select_related by reward_review's ``related``
    except ObjectDoesNotExist:
        return None
    return dict(
        zip(
            _CHANGE_KEYS,
            (
                relabel.new_reward,
                relabel.reason,
                relabel.case_id,
                relabel.rule.name if relabel.rule_id else None,
                relabel.created,
            ),
        )
    )


def _relabel_of_values(values: tuple) -> dict[str, Any] | None:
    change = dict(zip(_CHANGE_KEYS, values))
    return change if change["reason"] else None  # a left join's empty row: not relabelled


REWARD_REVIEW = hooks.RewardReview(
    related=("reward_relabel__rule",),
    values=tuple(f"reward_relabel__{name}" for name in _RELABEL_VALUES),
    of_evaluation=_relabel_of_evaluation,
    of_values=_relabel_of_values,
)


def relabelled_reward(evaluation: Evaluation) -> float | None:
    """The reward training data should use (the arena's effective reward: the floor for a hack)."""
    return arena_selectors.evaluation_reward(evaluation).effective


def relabelled_rewards(*, evaluation_ids: Iterable[int]) -> dict[int, float | None]:
    """{evaluation id: effective reward} for those of ``evaluation_ids`` that review relabelled (one query)."""
    rewards = arena_selectors.evaluation_rewards(evaluation_ids=evaluation_ids)
    return {pk: r.effective for pk, r in rewards.items() if r.changed_by is not None}


# --- audit ---------------------------------------------------------------------------------------


def audit_list(*, kernel_id: int | None = None) -> QuerySet[AuditEntry]:
    qs = AuditEntry.objects.select_related("actor")
    if kernel_id is not None:
        qs = qs.filter(kernel_id=kernel_id)
    return qs.order_by("-created", "-id")


# --- the checker against reviewer verdicts -------------------------------------------------------


@dataclass
class FamilyMetrics:
    family: str
    hacks: int = 0  # confirmed hacks reviewers put in this family
    caught: int = 0  # ... that the checker rejected
    fired: int = 0  # reviewed kernels the checker rejected with a finding of this family
    fired_hacks: int = 0  # ... that reviewers confirmed as hacks

    @property
    def recall(self) -> float | None:
        return self.caught / self.hacks if self.hacks else None

    @property
    def precision(self) -> float | None:
        return self.fired_hacks / self.fired if self.fired else None


@dataclass
class VersionMetrics:
    track: str
    version: str
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0
    families: list[FamilyMetrics] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


def _family_key(value: Any) -> str:
    return str(value) if value not in (None, "") else "other"


def _family_order(key: str) -> tuple[int, int]:
    return (0, int(key)) if key.isdigit() else (1, 0)


def checker_metrics(*, track: str = "strict") -> list[VersionMetrics]:
    """Precision and recall of the checker against reviewer verdicts, per rule-set version and family.

    Ground truth: decided cases (hack = positive, legit = negative). A kernel is checker-positive under
    a version when one of its evaluations ran under that version and was rejected, or a ``reject``
    static rule of that version matches its source. Versions: the built-in rule set, then every
    published RuleSetVersion of the track.
    """
    from gpu_workers.rules import default_rule_set, static_scan

    decided = list(
        ReviewCase.objects.filter(status__in=[ReviewCase.Status.HACK, ReviewCase.Status.LEGIT])
        .select_related("kernel")
        .only("id", "status", "family", "kernel__id", "kernel__source")
        .order_by("id")
    )
    base = default_rule_set(track)
    versions: list[tuple[str, dict]] = [(base["version"], base)]
    versions += [(v.version, v.rule_set) for v in rule_set_versions(track=track)]
    kernel_ids = [c.kernel_id for c in decided]
    rejected_by_version: dict[tuple[int, str], set[str]] = {}
    for kernel_id, version, findings in Evaluation.objects.filter(
        kernel_id__in=kernel_ids, track=track, status=Evaluation.Status.REJECTED
    ).values_list("kernel_id", "rule_set_version", "findings"):
        families = {_family_key(f.get("family")) for f in findings or [] if f.get("severity") == "reject"}
        rejected_by_version.setdefault((kernel_id, version), set()).update(families or {"other"})
    out = []
    for version, rule_set in versions:
        metrics = VersionMetrics(track=track, version=version)
        families: dict[str, FamilyMetrics] = {}
        for case in decided:
            fired = set(rejected_by_version.get((case.kernel_id, version), set()))
            for finding in static_scan(case.kernel.source, rule_set):
                if finding.severity == "reject":
                    fired.add(_family_key(finding.family))
            hack = case.status == ReviewCase.Status.HACK
            positive = bool(fired)
            if hack and positive:
                metrics.tp += 1
            elif hack:
                metrics.fn += 1
            elif positive:
                metrics.fp += 1
            else:
                metrics.tn += 1
            if hack:
                fam = families.setdefault(_family_key(case.family), FamilyMetrics(_family_key(case.family)))
                fam.hacks += 1
                fam.caught += int(positive)
            for key in fired:
                fam = families.setdefault(key, FamilyMetrics(key))
                fam.fired += 1
                fam.fired_hacks += int(hack)
        metrics.families = sorted(families.values(), key=lambda f: _family_order(f.family))
        out.append(metrics)
    return out


# --- export --------------------------------------------------------------------------------------


def _export_evaluation(evaluation: Evaluation) -> dict[str, Any]:
    return {
        "evaluation_id": evaluation.pk,
        "track": evaluation.track,
        "hardware": evaluation.hardware.key if evaluation.hardware_id else None,
        "status": evaluation.status,
        **arena_selectors.evaluation_reward(evaluation).to_dict(),
    }


def reviewed_kernels_export(*, include_open: bool = False) -> Iterator[dict[str, Any]]:
    """One dict per reviewed kernel (decided cases; open ones with verdicts too if asked), streamed.

    ``reward`` is the effective reward of the kernel's latest finished evaluation (``reward_original``
    and ``reward_changed_by`` beside it); ``evaluations`` lists every finished one the same way.
    """
    finished = (
        Evaluation.objects.exclude(status__in=[Evaluation.Status.QUEUED, Evaluation.Status.RUNNING])
        .select_related("hardware", *arena_selectors.evaluation_related())
        .order_by("-created", "-id")
    )
    statuses = [ReviewCase.Status.HACK, ReviewCase.Status.LEGIT]
    if include_open:
        statuses.append(ReviewCase.Status.OPEN)
    qs = (
        ReviewCase.objects.filter(status__in=statuses, verdicts__isnull=False)
        .distinct()
        .select_related("kernel__task", "kernel__submitter")
        .prefetch_related(
            Prefetch("verdicts", queryset=Verdict.objects.select_related("reviewer").order_by("id")),
            Prefetch("kernel__evaluations", queryset=finished),
        )
        .order_by("id")
    )
    for case in qs.iterator(chunk_size=200):
        verdicts = list(case.verdicts.all())
        evaluations = [_export_evaluation(ev) for ev in case.kernel.evaluations.all()]
        latest = evaluations[0] if evaluations else {}
        evidence = sorted({line for v in verdicts for line in (v.evidence_lines or [])})
        yield {
            "kernel_id": case.kernel_id,
            "task": case.kernel.task.name,
            "suite": case.kernel.task.suite,
            "submitter": case.kernel.submitter.name,
            "source": case.kernel.source,
            "verdict": case.status,
            "family": case.family or None,
            "reward": latest.get("reward"),
            "reward_original": latest.get("reward_original"),
            "reward_changed_by": latest.get("reward_changed_by"),
            "evaluations": evaluations,
            "evidence_lines": evidence,
            "notes": [v.notes for v in verdicts if v.notes],
            "reviews": [
                {
                    "reviewer": v.reviewer.get_username(),
                    "verdict": v.verdict,
                    "family": v.family or None,
                    "evidence_lines": list(v.evidence_lines or []),
                    "notes": v.notes,
                    "at": v.updated.isoformat(),
                }
                for v in verdicts
            ],
            "decided": case.decided.isoformat() if case.decided else None,
        }


def user_can_decide(user: Any) -> bool:
    return bool(user and user.is_authenticated and user.has_perm(conf.DECIDE_PERMISSION))
