"""Reads: lists and details for pages and the API, and the leaderboard."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from django.apps import apps
from django.db.models import Count, Prefetch, Q, QuerySet

from . import hooks, metrics
from .models import Evaluation, Hardware, Kernel, Submitter, Task

VERDICTS = (
    Evaluation.Status.PASSED,
    Evaluation.Status.COMPILE_ERROR,
    Evaluation.Status.RUNTIME_ERROR,
    Evaluation.Status.INCORRECT,
    Evaluation.Status.TIMEOUT,
    Evaluation.Status.REJECTED,
)
PAGE_SIZE_MAX = 100


def review_enabled() -> bool:
    return apps.is_installed("webapp.review")


def _hidden_kernels(track: str | None = None) -> QuerySet | None:
    """Kernels reviewers confirmed as hacks (a subquery, no query of its own); None when no app
    registered which kernels to hide (webapp.arena.hooks)."""
    return hooks.hidden_kernels(track)


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


def kernel_detail(*, kernel_id: int) -> Kernel:
    evaluations = Evaluation.objects.select_related("hardware").order_by("-created", "-id")
    related = ["task", "submitter", "review_case"] if review_enabled() else ["task", "submitter"]
    return (
        Kernel.objects.select_related(*related)
        .prefetch_related(Prefetch("evaluations", queryset=evaluations))
        .get(pk=kernel_id)
    )


def evaluation_list(
    *,
    kernel_id: int | None = None,
    status: str | None = None,
    track: str | None = None,
    hardware: str | None = None,
    submitter: str | None = None,
    task_id: int | None = None,
) -> QuerySet[Evaluation]:
    qs = Evaluation.objects.select_related("kernel__task", "kernel__submitter", "hardware")
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
    return Evaluation.objects.select_related("kernel__task", "kernel__submitter", "hardware").get(
        pk=evaluation_id
    )


def submitter_list(*, kind: str | None = None) -> QuerySet[Submitter]:
    qs = Submitter.objects.all()
    if kind:
        qs = qs.filter(kind=kind)
    return qs.order_by("name", "id")


def submitter_get(*, name: str) -> Submitter:
    return Submitter.objects.get(name=name)


def submitter_kernels(*, submitter_id: int, limit: int = 200) -> list[Kernel]:
    evaluations = Evaluation.objects.select_related("hardware").order_by("-created", "-id")
    return list(
        Kernel.objects.filter(submitter_id=submitter_id)
        .select_related("task")
        .prefetch_related(Prefetch("evaluations", queryset=evaluations))
        .order_by("-created", "-id")[:limit]
    )


def page_slice(qs: QuerySet, *, page: int, page_size: int) -> tuple[int, int, int, list]:
    """(count, page, page_size, items); page size capped at PAGE_SIZE_MAX, pages start at 1."""
    page_size = max(1, min(page_size, PAGE_SIZE_MAX))
    page = max(1, page)
    count = qs.count()
    start = (page - 1) * page_size
    return count, page, page_size, list(qs[start : start + page_size])


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
    evaluations: int = 1
    rejected_kernel_ids: set[int] = field(default_factory=set)
    review_kernel_ids: set[int] = field(default_factory=set)

    @property
    def outcome(self) -> metrics.TaskOutcome:
        return metrics.TaskOutcome(self.task_id, self.passed, self.speedup_eager, self.speedup_compile)

    @property
    def hacked(self) -> bool:
        return bool(self.rejected_kernel_ids)

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
        return True


FIGURES = ("attempted", "passed", "failed", "fast_1_eager", "fast_1_compile", "hacks")


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
    hacks_flagged: int
    needs_review: int

    def to_dict(self) -> dict:
        return asdict(self)


SORT_KEYS = (
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
)
DEFAULT_SORT = "-fast_1_eager"


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


def leaderboard_entries(
    *,
    track: str,
    hardware_id: int | None,
    suite: str | None = None,
    level: int | None = None,
    submitter_id: int | None = None,
    task_id: int | None = None,
) -> list[TaskEntry]:
    """One entry per (submitter, task) attempted in the slice; one query.

    Best evaluation: the highest speedup vs eager among passed evaluations (ties: the earliest);
    a task with no passing evaluation shows its latest verdict. Evaluations that are queued,
    running, or failed inside the evaluator ('error') are not attempts.
    """
    if hardware_id is None:
        return []
    qs = Evaluation.objects.filter(track=track, hardware_id=hardware_id, status__in=VERDICTS)
    hidden = _hidden_kernels(track)
    if hidden is not None:  # confirmed hacks leave the leaderboard (their rows stay, as evidence)
        qs = qs.exclude(kernel_id__in=hidden)
    if suite:
        qs = qs.filter(kernel__task__suite=suite)
    if level is not None:
        qs = qs.filter(kernel__task__level=level)
    if submitter_id is not None:
        qs = qs.filter(kernel__submitter_id=submitter_id)
    if task_id is not None:
        qs = qs.filter(kernel__task_id=task_id)
    rows = qs.order_by("id").values_list(
        "id",
        "kernel_id",
        "status",
        "correct",
        "speedup_eager",
        "speedup_compile",
        "needs_review",
        "kernel__task_id",
        "kernel__task__name",
        "kernel__task__level",
        "kernel__task__suite",
        "kernel__submitter_id",
        "kernel__submitter__name",
        "kernel__submitter__kind",
    )
    best: dict[tuple[int, int], tuple[tuple, TaskEntry]] = {}
    for (
        ev_id,
        kernel_id,
        status,
        correct,
        s_eager,
        s_compile,
        review,
        task_pk,
        task_name,
        task_level,
        task_suite,
        sub_id,
        sub_name,
        sub_kind,
    ) in rows:
        passed = status == Evaluation.Status.PASSED and correct
        rank = (1, s_eager or 0.0, -ev_id) if passed else (0, 0.0, ev_id)
        key = (sub_id, task_pk)
        current = best.get(key)
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
        )
        if current is not None:
            entry.evaluations = current[1].evaluations + 1
            entry.rejected_kernel_ids = current[1].rejected_kernel_ids
            entry.review_kernel_ids = current[1].review_kernel_ids
        if status == Evaluation.Status.REJECTED:
            entry.rejected_kernel_ids.add(kernel_id)
        if review:
            entry.review_kernel_ids.add(kernel_id)
        if current is None or rank > current[0]:
            best[key] = (rank, entry)
        else:
            current[1].evaluations = entry.evaluations
    return sorted(
        (e for _, e in best.values()),
        key=lambda e: (e.submitter_name, e.suite, e.task_level or 0, e.task_name),
    )


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
                hacks_flagged=len(set().union(*(e.rejected_kernel_ids for e in group))),
                needs_review=len(set().union(*(e.review_kernel_ids for e in group))),
            )
        )
    return leaderboard_sort(rows, sort=sort)


def leaderboard_sort(rows: list[LeaderboardRow], *, sort: str = DEFAULT_SORT) -> list[LeaderboardRow]:
    """Order by the chosen column (None last), then submitter name: a stable key."""
    descending = sort.startswith("-")
    key = sort.lstrip("-")
    if key not in SORT_KEYS:
        descending, key = True, DEFAULT_SORT.lstrip("-")
    rows = sorted(rows, key=lambda r: r.submitter)
    if key == "submitter":
        return list(reversed(rows)) if descending else rows
    present = [r for r in rows if getattr(r, key) is not None]
    missing = [r for r in rows if getattr(r, key) is None]
    present.sort(key=lambda r: getattr(r, key), reverse=descending)  # sort is stable: ties keep name order
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
    entries = leaderboard_entries(track=track, hardware_id=hardware.pk, suite=suite, level=level)
    rows = leaderboard_rows_from_entries(
        entries, track=track, hardware_key=hardware.key, suite=suite, level=level, sort=sort
    )
    return hardware, rows, entries


def submitter_summaries(*, submitter_id: int) -> list[LeaderboardRow]:
    """A submitter's leaderboard row on every (track, hardware) it has verdicts on."""
    pairs = (
        Evaluation.objects.filter(
            kernel__submitter_id=submitter_id, status__in=VERDICTS, hardware__isnull=False
        )
        .values_list("track", "hardware_id", "hardware__key")
        .distinct()
        .order_by("hardware__key", "track")
    )
    rows: list[LeaderboardRow] = []
    for track, hardware_id, hardware_key in pairs:
        entries = leaderboard_entries(track=track, hardware_id=hardware_id, submitter_id=submitter_id)
        rows.extend(
            leaderboard_rows_from_entries(
                entries, track=track, hardware_key=hardware_key, suite=None, level=None
            )
        )
    return rows
