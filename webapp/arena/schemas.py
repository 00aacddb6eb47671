"""Pydantic schemas of the arena API (in and out)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema

from webapp.core.permissions import visible_error
from webapp.core.text import Name, SafeJson, ShortText, Text

from . import selectors

# Kernel sources are capped in bytes by the endpoint (413, KERNEL_SOURCE_MAX_BYTES); this bound
# in characters only keeps NUL and lone surrogates out (the request body itself is capped at 2.5 MB).
SourceText = Text(4 * 1024 * 1024)


class TaskOut(Schema):
    id: int
    suite: str
    level: int | None
    name: str
    source_hash: str
    ops: list[Any]
    description: str
    data_source: str


class TaskDetailOut(TaskOut):
    source: str


class KernelOut(Schema):
    id: int
    task_id: int
    task: str
    submitter: str
    source_hash: str
    origin: str
    created: datetime

    @staticmethod
    def resolve_task(obj) -> str:
        return obj.task.name

    @staticmethod
    def resolve_submitter(obj) -> str:
        return obj.submitter.name


class RewardChangeOut(Schema):
    reason: str = Field(description="verdict: reviewers confirmed a hack; rule: a published reviewer rule")
    case_id: int | None
    rule: str | None
    at: datetime | None


class EvaluationOut(Schema):
    id: int
    kernel_id: int
    task_id: int
    submitter: str
    track: str
    device: str
    hardware: str | None
    status: str
    correct: bool
    findings: list[dict[str, Any]]
    needs_review: bool
    timings_ms: dict[str, Any]
    speedup_eager: float | None
    speedup_compile: float | None
    reward: float | None = Field(description="the effective reward: after review, what training should use")
    reward_original: float | None = Field(description="the reward the evaluator computed")
    reward_changed_by: RewardChangeOut | None = Field(
        description="the review decision that replaced the evaluator's reward; null when it stands"
    )
    reward_config: dict[str, str]
    rule_set: dict[str, str]
    message: str
    error: str
    attempts: int
    created: datetime
    started: datetime | None
    finished: datetime | None

    @staticmethod
    def resolve_task_id(obj) -> int:
        return obj.kernel.task_id

    @staticmethod
    def resolve_submitter(obj) -> str:
        return obj.kernel.submitter.name

    @staticmethod
    def resolve_hardware(obj) -> str | None:
        return obj.hardware.key if obj.hardware_id else None

    @staticmethod
    def resolve_reward(obj) -> float | None:
        return selectors.evaluation_reward(obj).effective

    @staticmethod
    def resolve_reward_original(obj) -> float | None:
        return selectors.evaluation_reward(obj).original

    @staticmethod
    def resolve_reward_changed_by(obj) -> dict | None:
        change = selectors.evaluation_reward(obj).changed_by
        return change.to_dict() if change else None

    @staticmethod
    def resolve_reward_config(obj) -> dict[str, str]:
        return {"name": obj.reward_config_name, "version": obj.reward_config_version}

    @staticmethod
    def resolve_rule_set(obj) -> dict[str, str]:
        return {"name": obj.rule_set_name, "version": obj.rule_set_version}

    @staticmethod
    def resolve_error(obj, context) -> str:
        """The evaluator's failure: in full to staff, without server paths to who requested it."""
        return visible_error(obj.error, user=context["request"].user, owner_id=obj.requested_by_id)


class EvaluationDetailOut(EvaluationOut):
    logs: str


class KernelDetailOut(KernelOut):
    source: str
    evaluations: list[EvaluationOut]

    @staticmethod
    def resolve_evaluations(obj) -> list:
        return list(obj.evaluations.all())


class SubmitterOut(Schema):
    id: int
    name: str
    kind: str
    metadata: dict[str, Any]


class SubmitterDetailOut(SubmitterOut):
    created_by: str | None
    members: list[str]

    @staticmethod
    def resolve_created_by(obj) -> str | None:
        return obj.created_by.get_username() if obj.created_by_id else None

    @staticmethod
    def resolve_members(obj) -> list[str]:
        return sorted(u.get_username() for u in obj.members.all())


class SubmitterUpdateIn(Schema):
    metadata: SafeJson


class SubmitterMemberIn(Schema):
    username: Text(150)


class HardwareOut(Schema):
    key: str
    name: str
    torch: str
    cuda: str


class Page(Schema):
    count: int
    page: int
    page_size: int


class TaskPage(Page):
    items: list[TaskOut]


class KernelPage(Page):
    items: list[KernelOut]


class SubmitterPage(Page):
    items: list[SubmitterOut]


class EvaluationPage(Page):
    items: list[EvaluationOut]


class LeaderboardRowOut(Schema):
    submitter: str
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
    hacks_flagged: int = Field(description="kernels counted as hacks: rejected by the evaluator for a "
                               "measurement hack, or hidden by review (confirmed hack, reviewer rule)")
    not_custom: int = Field(description="kernels rejected as not custom (library compute on strict): "
                            "failed tasks, not hacks")
    needs_review: int
    geomean_speedup_eager_spread: float | None = Field(
        description="relative spread of geomean_speedup_eager from the measured IQRs (null if unmeasured)"
    )
    rank: int = Field(description="competition rank under rank_order; tied rows share it")
    tied: bool


class LeaderboardEntryOut(Schema):
    submitter: str
    task_id: int
    task: str
    suite: str
    level: int | None
    status: str
    passed: bool
    speedup_eager: float | None
    speedup_compile: float | None
    evaluation_id: int
    kernel_id: int
    evaluations: int
    hacked: bool
    confirmed_hack: bool = Field(description="the kernel shown is hidden by review: failed, and a hack")
    not_custom: bool
    reward: float | None
    reward_original: float | None
    reward_changed_by: RewardChangeOut | None


class LeaderboardOut(Schema):
    rank_order: list[str]
    rank_order_text: str
    track: str
    suite: str | None
    level: int | None
    hardware: str | None
    rows: list[LeaderboardRowOut]


class KernelSubmitIn(Schema):
    """``submitter``: a name you may post under (yours, one you are a member of, or a new one, which
    becomes yours). ``submitter_kind``: left out, the existing submitter's kind (``model`` for a new
    one); given, it must match an existing submitter's kind (409 otherwise)."""

    task_id: int | None = None
    task: ShortText | None = None  # a task name, with ``suite`` when names repeat across suites
    suite: Text(64) | None = None
    submitter: Name
    submitter_kind: Literal["model", "agent", "checkpoint", "human"] | None = None
    source: SourceText
    track: Literal["strict", "open"] = "strict"


class KernelSubmitOut(Schema):
    kernel_id: int
    evaluation_id: int
    status: str
    poll: str


class ImportRowError(Schema):
    line: int
    reason: str


class ImportReportOut(Schema):
    created: int
    updated: int
    skipped: int
    queued: int
    errors: list[ImportRowError]


class ImportKernelbenchIn(Schema):
    path: Text(1000)


class ErrorOut(Schema):
    detail: str
