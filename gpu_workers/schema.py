"""Data that crosses the evaluator's border: requests, results, findings.

Plain dataclasses (a bare GPU node has torch but not pydantic), each with ``to_dict`` /
``from_dict`` so they travel as JSON through Celery, Ray and the command line.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

STATUSES = ("passed", "compile_error", "runtime_error", "incorrect", "timeout", "rejected")
# A failed result's message starts so when the infrastructure caused it (a neighbour's CUDA
# out-of-memory that persisted, a GPU that never had room), never the kernel or the task: it is no
# verdict, and is evaluated again on resubmission.
INFRASTRUCTURE = "infrastructure: "


def is_infrastructure(message: str) -> bool:
    return str(message or "").startswith(INFRASTRUCTURE)
SEVERITIES = ("reject", "review")
DEVICES = ("cpu", "cuda")
TRACKS = ("strict", "open")
BASELINES = ("eager", "compile", "compile_reduce_overhead", "compile_max_autotune", "cuda_graph")


def source_hash(text: str) -> str:
    """Content hash used for tasks, kernels and caches (sha256 of the UTF-8 text)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class Finding:
    """One integrity observation: the rule that fired, how bad it is, and why."""

    rule: str
    severity: str  # "reject" fails the kernel; "review" sends it to the review queue
    message: str
    family: int | None = None  # the row of REWARD_HACKS.md it defends against, when one does

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finding:
        return cls(
            rule=str(data["rule"]),
            severity=str(data["severity"]),
            message=str(data.get("message", "")),
            family=data.get("family"),
        )


@dataclass
class EvalRequest:
    """Everything one evaluation needs; sources travel as text, never as paths."""

    task_source: str
    kernel_source: str
    device: str = "cpu"
    track: str = "strict"
    task_name: str = ""
    # Size profile of the task (see gpu_workers.tasks); None picks the device's own profile.
    profile: str | None = None
    # Scale the task's module-level size constants down until no input, output or parameter has more
    # than this many elements (gpu_workers.child.size); None: the task's own sizes.
    max_elements: int | None = None
    # Rule set and reward config as data; None takes the built-in default for the track.
    rule_set: dict[str, Any] | None = None
    reward_config: dict[str, Any] | None = None
    trials: int = 5
    atol: float = 1e-2
    rtol: float = 1e-2
    baselines: tuple[str, ...] = ("eager", "compile")
    timing_budget_s: float = 2.0
    compile_timeout_s: float = 900.0
    run_timeout_s: float = 300.0
    # Each child's memory limit; None: from the task's own bytes (gpu_workers.tasks.budget).
    memory_limit_mb: int | None = None
    gpu_index: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise ValueError(f"device must be one of {DEVICES}, got {self.device!r}")
        if self.track not in TRACKS:
            raise ValueError(f"track must be one of {TRACKS}, got {self.track!r}")
        if self.trials < 1:
            raise ValueError("trials must be at least 1")
        if self.max_elements is not None and self.max_elements < 1:
            raise ValueError("max_elements must be at least 1")
        unknown = [b for b in self.baselines if b not in BASELINES]
        if unknown:
            raise ValueError(f"unknown baselines {unknown}; choose from {BASELINES}")
        self.baselines = tuple(self.baselines)

    @property
    def task_hash(self) -> str:
        return source_hash(self.task_source)

    @property
    def kernel_hash(self) -> str:
        return source_hash(self.kernel_source)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["baselines"] = list(self.baselines)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalRequest:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown EvalRequest fields: {unknown}")
        kwargs = dict(data)
        if "baselines" in kwargs:
            kwargs["baselines"] = tuple(kwargs["baselines"])
        return cls(**kwargs)


@dataclass
class EvalResult:
    """The verdict. ``status`` is one of STATUSES; times are milliseconds (medians)."""

    status: str
    correct: bool = False
    findings: list[Finding] = field(default_factory=list)
    reward: float = 0.0
    timings_ms: dict[str, float | None] = field(default_factory=dict)
    speedup: dict[str, float | None] = field(default_factory=dict)
    message: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    trials_passed: int = 0
    trials: int = 0
    hardware: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # {"evaluator": EvaluatorSettings, "rule_set", "reward_config"}
    rule_set: dict[str, Any] = field(default_factory=dict)  # {"name", "version"}
    reward_config: dict[str, Any] = field(default_factory=dict)  # {"name", "version"}
    track: str = "strict"
    task_hash: str = ""
    kernel_hash: str = ""
    timing_stats: dict[str, Any] = field(default_factory=dict)
    floor_ms: float | None = None
    compile_ms: float | None = None
    duration_s: float | None = None
    compile_log: str = ""
    run_log: str = ""
    # findings (rules) that leave the result its correctness reward but no speed reward until a
    # reviewer clears them (the rule set's ``withhold_speed``)
    speed_withheld: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def rejects(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "reject"]

    @property
    def needs_review(self) -> bool:
        return any(f.severity == "review" for f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["findings"] = [f.to_dict() for f in self.findings]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["findings"] = [Finding.from_dict(f) for f in data.get("findings", [])]
        return cls(**kwargs)
