"""Reads: lists and details for pages and the API, and the leaderboard."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db.models import BooleanField, Count, Exists, OuterRef, Prefetch, Q, QuerySet, Value

from . import findings, hooks, metrics
from .models import Evaluation, Hardware, Kernel, Submitter, Task

VERDICTS = (
    Evaluation.Status.PASSED,
    Evaluation.Status.COMPILE_ERROR,
    Evaluation.Status.RUNTIME_ERROR,
    Evaluation.Status.INCORRECT,
    Evaluation.Status.TIMEOUT,
    Evaluation.Status.REJECTED,
)


def review_enabled() -> bool:
    return apps.is_installed("webapp.review")


def _hidden_kernels(track: str | None = None) -> QuerySet | None:
    """Kernels reviewers confirmed as hacks (a subquery, no query of its own); None when no app
    registered which kernels to hide (webapp.arena.hooks)."""
    return hooks.hidden_kernels(track)


# --- rewards: the reward after review -------------------------------------------------------------


@dataclass(frozen=True)
class RewardChange:
    """What replaced an evaluation's reward: reviewers' hack verdict, or a published reviewer rule."""

    reason: str  # "verdict" or "rule"
    case_id: int | None
    rule: str | None  # the reviewer rule's name, for reason "rule"
    at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "case_id": self.case_id,
            "rule": self.rule,
            "at": self.at.isoformat() if self.at else None,
        }


@dataclass(frozen=True)
class EffectiveReward:
    effective: float | None  # what training and every page use
    original: float | None  # what the evaluator computed
    changed_by: RewardChange | None  # None: the evaluator's reward stands

    def to_dict(self) -> dict[str, Any]:
        return {
            "reward": self.effective,
            "reward_original": self.original,
            "reward_changed_by": self.changed_by.to_dict() if self.changed_by else None,
        }


def reward_effective(
    *,
    reward: float | None,
    relabel_reward: float | None = None,
    reason: str | None = None,
    case_id: int | None = None,
    rule: str | None = None,
    at: datetime | None = None,
) -> EffectiveReward:
    """The one place a reward meets its review: a relabel (``reason`` set) replaces the evaluator's."""
    if not reason:
        return EffectiveReward(effective=reward, original=reward, changed_by=None)
    return EffectiveReward(
        effective=relabel_reward,
        original=reward,
        changed_by=RewardChange(reason=reason, case_id=case_id, rule=rule, at=at),
    )


def evaluation_related() -> list[str]:
    """select_related paths that make ``evaluation_reward`` free of queries."""
    review = hooks.reward_review()
    return list(review.related) if review is not None else []


def evaluation_reward(evaluation: Evaluation) -> EffectiveReward:
    """The effective reward of an evaluation (select_related ``evaluation_related()`` in lists)."""
    review = hooks.reward_review()
    change = review.of_evaluation(evaluation) if review is not None else None
    return reward_effective(reward=evaluation.reward, **(change or {}))


def evaluation_rewards(*, evaluation_ids: Iterable[int]) -> dict[int, EffectiveReward]:
    """{evaluation id: effective reward} in one query."""
    qs = Evaluation.objects.filter(pk__in=list(evaluation_ids)).select_related(*evaluation_related())
    return {ev.pk: evaluation_reward(ev) for ev in qs}


# --- lists and details ---------------------------------------------------------------------------


def task_list(*, suite: str | None = None, level: int | None = None, q: str | None = None) -> QuerySet[Task]:
    qs = Task.objects.all()
    if suite:
        qs = qs.filter(suite=suite)
    if level is not None:
        qs = qs.filter(level=level)
    if q:
        qs = qs.filter(Q(name__icontains=q) | Q(description__icontains=q))
    return qs.order_by("suite", "level", "name", "id")


def task_get(*, task_id: int) -> Task:
    return Task.objects.get(pk=task_id)


def task_find(
    *, task_id: int | None = None, suite: str | None = None, name: str | None = None
) -> Task | None:
    if task_id is not None:
        return Task.objects.filter(pk=task_id).first()
    if name:
        qs = Task.objects.filter(name=name)
        if suite:
            qs = qs.filter(suite=suite)
        return qs.order_by("id").first()
    return None


def kernel_list(
    *, task_id: int | None = None, submitter: str | None = None, origin: str | None = None
) -> QuerySet[Kernel]:
    qs = Kernel.objects.select_related("task", "submitter")
    hidden = _hidden_kernels()
    if hidden is not None:  # hidden from listings; the kernel page keeps the evidence
        qs = qs.exclude(pk__in=hidden)
    if task_id is not None:
        qs = qs.filter(task_id=task_id)
    if submitter:
        qs = qs.filter(submitter__name=submitter)
    if origin:
        qs = qs.filter(origin=origin)
    return qs.order_by("-created", "-id")


def kernel_detail(*, kernel_id: int, with_evaluations: bool = True) -> Kernel:
    """A kernel with its task and submitter (and every evaluation, prefetched, unless told not to)."""
    related = ["task", "submitter", "review_case"] if review_enabled() else ["task", "submitter"]
    qs = Kernel.objects.select_related(*related)
    if with_evaluations:
        qs = qs.prefetch_related(Prefetch("evaluations", queryset=kernel_evaluations(kernel_id=kernel_id)))
    return qs.get(pk=kernel_id)


def evaluation_list(
    *,
    kernel_id: int | None = None,
    status: str | None = None,
    track: str | None = None,
    hardware: str | None = None,
    submitter: str | None = None,
    task_id: int | None = None,
) -> QuerySet[Evaluation]:
    qs = Evaluation.objects.select_related(
        "kernel__task", "kernel__submitter", "hardware", *evaluation_related()
    )
    if kernel_id is not None:
        qs = qs.filter(kernel_id=kernel_id)
    if status:
        qs = qs.filter(status=status)
    if track:
        qs = qs.filter(track=track)
    if hardware:
        qs = qs.filter(hardware__key=hardware)
    if submitter:
        qs = qs.filter(kernel__submitter__name=submitter)
    if task_id is not None:
        qs = qs.filter(kernel__task_id=task_id)
    return qs.order_by("-created", "-id")


def evaluation_get(*, evaluation_id: int) -> Evaluation:
    return Evaluation.objects.select_related(
        "kernel__task", "kernel__submitter", "hardware", *evaluation_related()
    ).get(pk=evaluation_id)


def submitter_list(*, kind: str | None = None) -> QuerySet[Submitter]:
    qs = Submitter.objects.all()
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("name", "id")


def submitter_get(*, name: str) -> Submitter:
    return Submitter.objects.get(name=name)


def submitter_kernels(*, submitter_id: int) -> QuerySet[Kernel]:
    """A submitter's kernels, newest first, each with its evaluations (page it with ``page_slice``)."""
    evaluations = Evaluation.objects.select_related("hardware", *evaluation_related()).order_by(
        "-created", "-id"
    )
    return (
        Kernel.objects.filter(submitter_id=submitter_id)
        .select_related("task")
        .prefetch_related(Prefetch("evaluations", queryset=evaluations))
        .order_by("-created", "-id")
    )


def kernel_evaluations(*, kernel_id: int) -> QuerySet[Evaluation]:
    """A kernel's evaluations, newest first, with what their rewards need (page it with ``page_slice``)."""
    return (
        Evaluation.objects.filter(kernel_id=kernel_id)
        .select_related("hardware", *evaluation_related())
        .order_by("-created", "-id")
    )


# --- leaderboard ---------------------------------------------------------------------------------


@dataclass
class TaskEntry:
    """A submitter's best evaluation of one task in one leaderboard slice."""

    submitter_id: int
    submitter_name: str
    submitter_kind: str
    task_id: int
    task_name: str
    task_level: int | None
    suite: str
    evaluation_id: int
    kernel_id: int
    status: str
    passed: bool
    speedup_eager: float | None
    speedup_compile: float | None
    reward: EffectiveReward | None = None
    # relative spread of the speedup vs eager, when measured: the kernel's + eager's IQR / median, or
    # the half-width of the speedup's 95% interval in log terms where that is wider
    spread_eager: float | None = None
    confirmed_hack: bool = False  # the shown kernel is hidden by review (a hack verdict or reviewer rule)
    evaluations: int = 1
    hack_kernel_ids: set[int] = field(default_factory=set)
    not_custom_kernel_ids: set[int] = field(default_factory=set)
    review_kernel_ids: set[int] = field(default_factory=set)

    @property
    def outcome(self) -> metrics.TaskOutcome:
        return metrics.TaskOutcome(self.task_id, self.passed, self.speedup_eager, self.speedup_compile)

    @property
    def hacked(self) -> bool:
        return bool(self.hack_kernel_ids)

    @property
    def not_custom(self) -> bool:
        """Rejected on its track's policy (library compute on strict), and no hack on this task."""
        return bool(self.not_custom_kernel_ids) and not self.hacked

    def in_figure(self, figure: str) -> bool:
        """Whether this entry is behind a leaderboard figure (the links under each number)."""
        if figure in ("attempted", ""):
            return True
        if figure == "passed":
            return self.passed
        if figure == "failed":
            return not self.passed
        if figure == "fast_1_eager":
            return metrics.is_fast(self.outcome, p=1.0, baseline="eager")
        if figure == "fast_1_compile":
            return metrics.is_fast(self.outcome, p=1.0, baseline="compile")
        if figure == "hacks":
            return self.hacked
        if figure == "not_custom":
            return self.not_custom
        return True


FIGURES = ("attempted", "passed", "failed", "fast_1_eager", "fast_1_compile", "hacks", "not_custom")


@dataclass
class LeaderboardRow:
    submitter: str
    submitter_id: int
    submitter_kind: str
    track: str
    suite: str | None
    level: int | None
    hardware: str
    tasks_attempted: int
    tasks_passed: int
    pass_rate: float | None
    fast_1_eager: float | None
    fast_1_compile: float | None
    geomean_speedup_eager: float | None
    geomean_speedup_compile: float | None
    geomean_speedup_eager_all: float | None
    geomean_speedup_compile_all: float | None
    hacks_flagged: int  # kernels counted as hacks: caught by the evaluator or confirmed by review
    not_custom: int  # kernels rejected as not custom (library compute on strict): failures, not hacks
    needs_review: int
    # relative spread of geomean_speedup_eager, from the kernels' and baselines' measured spreads
    geomean_speedup_eager_spread: float | None = None
    rank: int = 0
    tied: bool = False  # shares its rank with another row

    def to_dict(self) -> dict:
        return asdict(self)


# The ranking, best first: each figure is compared only when all before it are equal.
RANK_ORDER = ("fast_1_compile", "fast_1_eager", "pass_rate", "geomean_speedup_eager")
RANK_ORDER_TEXT = (
    "fast₁ vs torch.compile, then fast₁ vs eager, then pass rate, then the geomean speedup vs eager of "
    "correct kernels; rows equal on all four (geomeans within their measured spread) share a rank"
)

SORT_KEYS = (
    "rank",
    "submitter",
    "tasks_attempted",
    "pass_rate",
    "fast_1_eager",
    "fast_1_compile",
    "geomean_speedup_eager",
    "geomean_speedup_compile",
    "geomean_speedup_eager_all",
    "geomean_speedup_compile_all",
    "hacks_flagged",
    "not_custom",
)
DEFAULT_SORT = "rank"


def hardware_list() -> list[Hardware]:
    return list(Hardware.objects.order_by("key"))


def leaderboard_hardware(*, track: str, key: str | None = None) -> Hardware | None:
    """The hardware a leaderboard is computed on: the one asked for, else the most evaluated one."""
    if key:
        return Hardware.objects.filter(key=key).first()
    return (
        Hardware.objects.annotate(n=Count("evaluations", filter=Q(evaluations__track=track)))
        .filter(n__gt=0)
        .order_by("-n", "key")
        .first()
    )


def leaderboard_filter_choices() -> dict[str, list]:
    suites = list(Task.objects.order_by("suite").values_list("suite", flat=True).distinct())
    levels = list(
        Task.objects.exclude(level=None).order_by("level").values_list("level", flat=True).distinct()
    )
    return {"suites": suites, "levels": levels, "tracks": list(Evaluation.Track.values)}


_ENTRY_FIELDS = (
    "id",
    "kernel_id",
    "status",
    "correct",
    "speedup_eager",
    "speedup_compile",
    "needs_review",
    "findings",
    "reward",
    "result__timing_stats__kernel__spread",
    "result__timing_stats__eager__spread",
    "result__timing_stats__speedup_interval__eager",
    "hidden",
    "kernel__task_id",
    "kernel__task__name",
    "kernel__task__level",
    "kernel__task__suite",
    "kernel__submitter_id",
    "kernel__submitter__name",
    "kernel__submitter__kind",
)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _log_half_width(interval: Any) -> float | None:
    """Half the width of a speedup's interval ``[lo, hi]`` in log terms (None unless it is one)."""
    if not isinstance(interval, list | tuple) or len(interval) != 2:
        return None
    lo, hi = (_number(v) for v in interval)
    if lo is None or hi is None or not 0 < lo <= hi or not math.isfinite(hi):
        return None
    return (math.log(hi) - math.log(lo)) / 2


def leaderboard_entries(
    *,
    track: str,
    hardware_id: int | None,
    suite: str | None = None,
    level: int | None = None,
    submitter_id: int | None = None,
    task_id: int | None = None,
    hardware_key: str | None = None,
) -> list[TaskEntry]:
    """One entry per (submitter, task) attempted in the slice; one query (two without ``hardware_key``).

    Best evaluation: the highest speedup vs eager among passed evaluations (ties: the earliest);
    a task with no passing evaluation shows its latest verdict. Evaluations that are queued,
    running, or failed inside the evaluator ('error') are not attempts. A kernel review hid (a
    confirmed hack, or a published reviewer rule) stays an attempt: failed, and counted as a hack.
    A kernel rejected before it ran (no hardware row) counts on every hardware of its device.
    """
    if hardware_id is None:
        return []
    key = hardware_key or Hardware.objects.filter(pk=hardware_id).values_list("key", flat=True).first()
    if key is None:
        return []
    device = key.split(":", 1)[0]
    qs = Evaluation.objects.filter(track=track, status__in=VERDICTS).filter(
        Q(hardware_id=hardware_id)
        | Q(hardware__isnull=True, status=Evaluation.Status.REJECTED, device=device)
    )
    hidden = _hidden_kernels(track)
    if hidden is not None:
        qs = qs.annotate(hidden=Exists(hidden.filter(pk=OuterRef("kernel_id"))))
    else:
        qs = qs.annotate(hidden=Value(False, output_field=BooleanField()))
    if suite:
        qs = qs.filter(kernel__task__suite=suite)
    if level is not None:
        qs = qs.filter(kernel__task__level=level)
    if submitter_id is not None:
        qs = qs.filter(kernel__submitter_id=submitter_id)
    if task_id is not None:
        qs = qs.filter(kernel__task_id=task_id)
    reward_review = hooks.reward_review()
    fields = _ENTRY_FIELDS + (reward_review.values if reward_review is not None else ())
    best: dict[tuple[int, int], tuple[tuple, TaskEntry]] = {}
    for row in qs.order_by("id").values_list(*fields):
        (
            ev_id,
            kernel_id,
            status,
            correct,
            s_eager,
            s_compile,
            review,
            found,
            reward,
            spread_kernel,
            spread_eager,
            interval_eager,
            hidden_kernel,
            task_pk,
            task_name,
            task_level,
            task_suite,
            sub_id,
            sub_name,
            sub_kind,
        ) = row[: len(_ENTRY_FIELDS)]
        change = reward_review.of_values(row[len(_ENTRY_FIELDS) :]) if reward_review is not None else None
        passed = status == Evaluation.Status.PASSED and correct and not hidden_kernel
        rank = (1, s_eager or 0.0, -ev_id) if passed else (0, 0.0, ev_id)
        spreads = (_number(spread_kernel), _number(spread_eager))
        spread = spreads[0] + spreads[1] if None not in spreads else None
        width = _log_half_width(interval_eager)
        if width is not None:  # the speedup's interval, which holds the run-to-run spread where it is known
            spread = width if spread is None else max(spread, width)
        entry = TaskEntry(
            submitter_id=sub_id,
            submitter_name=sub_name,
            submitter_kind=sub_kind,
            task_id=task_pk,
            task_name=task_name,
            task_level=task_level,
            suite=task_suite,
            evaluation_id=ev_id,
            kernel_id=kernel_id,
            status=status,
            passed=passed,
            speedup_eager=s_eager if passed else None,
            speedup_compile=s_compile if passed else None,
            reward=reward_effective(reward=reward, **(change or {})),
            spread_eager=spread if passed else None,
            confirmed_hack=bool(hidden_kernel),
        )
        key_ = (sub_id, task_pk)
        current = best.get(key_)
        if current is not None:
            entry.evaluations = current[1].evaluations + 1
            entry.hack_kernel_ids = current[1].hack_kernel_ids
            entry.not_custom_kernel_ids = current[1].not_custom_kernel_ids
            entry.review_kernel_ids = current[1].review_kernel_ids
        kind = findings.rejection_kind(status=status, findings=found)
        if hidden_kernel or kind == findings.HACK:
            entry.hack_kernel_ids.add(kernel_id)
        elif kind == findings.NOT_CUSTOM:
            entry.not_custom_kernel_ids.add(kernel_id)
        if review:
            entry.review_kernel_ids.add(kernel_id)
        if current is None or rank > current[0]:
            best[key_] = (rank, entry)
        else:
            current[1].evaluations = entry.evaluations
    return sorted(
        (e for _, e in best.values()),
        key=lambda e: (e.submitter_name, e.suite, e.task_level or 0, e.task_name),
    )


def _geomean_spread(entries: Sequence[TaskEntry]) -> float | None:
    """Spread of the log-geomean of correct speedups vs eager: sqrt(sum s_i²) / n (None if unmeasured)."""
    spreads = [e.spread_eager for e in entries if e.passed and e.speedup_eager]
    if not spreads or any(s is None for s in spreads):
        return None
    return math.sqrt(sum(s * s for s in spreads)) / len(spreads)


def leaderboard_rows_from_entries(
    entries: Sequence[TaskEntry],
    *,
    track: str,
    hardware_key: str,
    suite: str | None,
    level: int | None,
    sort: str = DEFAULT_SORT,
) -> list[LeaderboardRow]:
    by_submitter: dict[int, list[TaskEntry]] = {}
    for entry in entries:
        by_submitter.setdefault(entry.submitter_id, []).append(entry)
    rows = []
    for group in by_submitter.values():
        outcomes = [e.outcome for e in group]
        first = group[0]
        hacks = set().union(*(e.hack_kernel_ids for e in group))
        rows.append(
            LeaderboardRow(
                submitter=first.submitter_name,
                submitter_id=first.submitter_id,
                submitter_kind=first.submitter_kind,
                track=track,
                suite=suite,
                level=level,
                hardware=hardware_key,
                tasks_attempted=len(outcomes),
                tasks_passed=sum(o.passed for o in outcomes),
                pass_rate=metrics.pass_rate(outcomes),
                fast_1_eager=metrics.fast_p(outcomes, p=1.0, baseline="eager"),
                fast_1_compile=metrics.fast_p(outcomes, p=1.0, baseline="compile"),
                geomean_speedup_eager=metrics.geomean_speedup_correct(outcomes, baseline="eager"),
                geomean_speedup_compile=metrics.geomean_speedup_correct(outcomes, baseline="compile"),
                geomean_speedup_eager_all=metrics.geomean_speedup_all(outcomes, baseline="eager"),
                geomean_speedup_compile_all=metrics.geomean_speedup_all(outcomes, baseline="compile"),
                hacks_flagged=len(hacks),
                not_custom=len(set().union(*(e.not_custom_kernel_ids for e in group)) - hacks),
                needs_review=len(set().union(*(e.review_kernel_ids for e in group))),
                geomean_speedup_eager_spread=_geomean_spread(group),
            )
        )
    return leaderboard_sort(leaderboard_rank(rows), sort=sort)


def _rank_key(row: LeaderboardRow) -> tuple[float, ...]:
    return tuple(-math.inf if getattr(row, k) is None else getattr(row, k) for k in RANK_ORDER)


def rows_tie(a: LeaderboardRow, b: LeaderboardRow) -> bool:
    """Equal on every ranked figure; the geomeans may differ inside their combined measured spread."""
    key_a, key_b = _rank_key(a), _rank_key(b)
    if key_a[:-1] != key_b[:-1]:
        return False
    ga, gb = a.geomean_speedup_eager, b.geomean_speedup_eager
    if ga is None or gb is None or ga == gb:
        return ga == gb
    sa, sb = a.geomean_speedup_eager_spread, b.geomean_speedup_eager_spread
    return sa is not None and sb is not None and abs(math.log(ga) - math.log(gb)) <= sa + sb


def leaderboard_rank(rows: Sequence[LeaderboardRow]) -> list[LeaderboardRow]:
    """Rows in RANK_ORDER with competition ranks (1, 1, 3): a row tied with its group's first row
    shares that rank. Within a tie, rows are listed by name (display order only, not a rank)."""
    ordered = sorted(rows, key=lambda r: r.submitter)
    ordered.sort(key=_rank_key, reverse=True)  # stable: ties keep name order
    leader: LeaderboardRow | None = None
    for index, row in enumerate(ordered):
        if leader is not None and rows_tie(leader, row):
            row.rank = leader.rank
            row.tied = leader.tied = True
        else:
            row.rank, row.tied, leader = index + 1, False, row
    return ordered


def leaderboard_sort(rows: list[LeaderboardRow], *, sort: str = DEFAULT_SORT) -> list[LeaderboardRow]:
    """Order ranked rows by the chosen column (None last), then by rank, then name; ranks stay."""
    descending = sort.startswith("-")
    key = sort.lstrip("-")
    if key not in SORT_KEYS:
        descending, key = False, DEFAULT_SORT
    rows = sorted(rows, key=lambda r: (r.rank, r.submitter))
    if key == "rank":
        return list(reversed(rows)) if descending else rows
    if key == "submitter":
        rows = sorted(rows, key=lambda r: r.submitter)
        return list(reversed(rows)) if descending else rows
    present = [r for r in rows if getattr(r, key) is not None]
    missing = [r for r in rows if getattr(r, key) is None]
    present.sort(key=lambda r: getattr(r, key), reverse=descending)  # stable: ties keep rank order
    return present + missing


def leaderboard_rows(
    *,
    track: str,
    hardware_key: str | None = None,
    suite: str | None = None,
    level: int | None = None,
    sort: str = DEFAULT_SORT,
) -> tuple[Hardware | None, list[LeaderboardRow], list[TaskEntry]]:
    """The leaderboard of one (track, hardware, suite?, level?) slice: (hardware, rows, entries)."""
    hardware = leaderboard_hardware(track=track, key=hardware_key)
    if hardware is None:
        return None, [], []
    entries = leaderboard_entries(
        track=track, hardware_id=hardware.pk, suite=suite, level=level, hardware_key=hardware.key
    )
    rows = leaderboard_rows_from_entries(
        entries, track=track, hardware_key=hardware.key, suite=suite, level=level, sort=sort
    )
    return hardware, rows, entries


def submitter_slices(*, submitter_id: int) -> list[tuple[LeaderboardRow, list[TaskEntry]]]:
    """A submitter's leaderboard row, with its task entries, on every (track, hardware) it has verdicts on."""
    pairs = (
        Evaluation.objects.filter(
            kernel__submitter_id=submitter_id, status__in=VERDICTS, hardware__isnull=False
        )
        .values_list("track", "hardware_id", "hardware__key")
        .distinct()
        .order_by("hardware__key", "track")
    )
    out: list[tuple[LeaderboardRow, list[TaskEntry]]] = []
    for track, hardware_id, hardware_key in pairs:
        entries = leaderboard_entries(
            track=track, hardware_id=hardware_id, submitter_id=submitter_id, hardware_key=hardware_key
        )
        for row in leaderboard_rows_from_entries(
            entries, track=track, hardware_key=hardware_key, suite=None, level=None
        ):
            out.append((row, entries))
    return out


def submitter_summaries(*, submitter_id: int) -> list[LeaderboardRow]:
    """A submitter's leaderboard row on every (track, hardware) it has verdicts on."""
    return [row for row, _ in submitter_slices(submitter_id=submitter_id)]
