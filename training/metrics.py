"""Per-step metrics and sampled trajectories, emitted through a small sink protocol.

The web app plugs in its own sink (store the row, then ring the channel layer); the command line
uses ``JsonlSink`` on stdout and on ``metrics.jsonl`` in the run directory.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from training.rollout import Rollout

# Fields that depend on the wall clock; everything else is deterministic under a fixed seed.
TIMING_FIELDS = ("step_time_s", "eval_latency_mean_s", "eval_latency_max_s", "timestamp")


@dataclass
class RunMetrics:
    step: int  # global step, 1-based
    stage: str
    stage_kind: str
    stage_step: int  # 1-based within the stage
    num_rollouts: int = 0
    reward_mean: float | None = None  # each rollout scored by its best turn
    reward_max: float | None = None
    reward_min: float | None = None
    reward_std: float | None = None
    # rates over rollouts that reached the evaluator at least once (None on a synthetic reward)
    pass_rate: float | None = None
    faster_than_eager_rate: float | None = None
    faster_than_compile_rate: float | None = None
    hack_rate: float | None = None
    review_rate: float | None = None
    format_error_rate: float | None = None
    timeout_rate: float | None = None  # share of evaluations that timed out
    kl: float | None = None
    policy_loss: float | None = None
    value_loss: float | None = None
    sft_loss: float | None = None
    entropy: float | None = None
    clip_fraction: float | None = None
    grad_norm: float | None = None
    response_length_mean: float | None = None
    turns_mean: float | None = None
    kept_for_sft: int | None = None  # rft: rollouts that passed the reward bar
    eval_latency_mean_s: float | None = None
    eval_latency_max_s: float | None = None
    step_time_s: float | None = None
    lr: float | None = None
    timestamp: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return {k: _json_number(v) for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunMetrics:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def deterministic_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.to_dict().items() if k not in TIMING_FIELDS}


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


@dataclass
class TrajectorySample:
    step: int
    task: str
    group: int
    index: int
    reward: float
    turns: list[dict[str, Any]]  # {text, observation, reward, status, outcome, action_tokens}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_rollout(cls, step: int, rollout: Rollout) -> TrajectorySample:
        d = rollout.to_dict()
        return cls(step=step, task=d["task"], group=d["group"], index=d["index"], reward=d["reward"], turns=d["turns"])


@dataclass
class CheckpointInfo:
    step: int
    stage: str
    path: str
    config_hash: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class MetricsSink(Protocol):
    """What a training run reports. Implement all four; ``BaseSink`` gives no-op defaults."""

    def emit_metrics(self, metrics: RunMetrics) -> None: ...

    def emit_trajectories(self, step: int, samples: Sequence[TrajectorySample]) -> None: ...

    def emit_checkpoint(self, info: CheckpointInfo) -> None: ...

    def emit_status(self, status: str, detail: dict[str, Any]) -> None: ...


class BaseSink:
    def emit_metrics(self, metrics: RunMetrics) -> None:
        pass

    def emit_trajectories(self, step: int, samples: Sequence[TrajectorySample]) -> None:
        pass

    def emit_checkpoint(self, info: CheckpointInfo) -> None:
        pass

    def emit_status(self, status: str, detail: dict[str, Any]) -> None:
        pass


class ListSink(BaseSink):
    """Keeps everything in memory (tests, notebooks)."""

    def __init__(self) -> None:
        self.metrics: list[RunMetrics] = []
        self.trajectories: dict[int, list[TrajectorySample]] = {}
        self.checkpoints: list[CheckpointInfo] = []
        self.statuses: list[tuple[str, dict[str, Any]]] = []

    def emit_metrics(self, metrics: RunMetrics) -> None:
        self.metrics.append(metrics)

    def emit_trajectories(self, step: int, samples: Sequence[TrajectorySample]) -> None:
        self.trajectories[step] = list(samples)

    def emit_checkpoint(self, info: CheckpointInfo) -> None:
        self.checkpoints.append(info)

    def emit_status(self, status: str, detail: dict[str, Any]) -> None:
        self.statuses.append((status, detail))


class JsonlSink(BaseSink):
    """One JSON object per line: ``{"type": "metrics"|"trajectories"|"checkpoint"|"status", …}``.

    ``metrics_only`` writes only the metrics lines (what ``python -m training run`` prints)."""

    def __init__(self, stream: IO[str] | None = None, *, metrics_only: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.metrics_only = metrics_only

    def _write(self, obj: dict[str, Any]) -> None:
        self.stream.write(json.dumps(obj, sort_keys=True) + "\n")
        self.stream.flush()

    def emit_metrics(self, metrics: RunMetrics) -> None:
        self._write({"type": "metrics", **metrics.to_dict()})

    def emit_trajectories(self, step: int, samples: Sequence[TrajectorySample]) -> None:
        if not self.metrics_only:
            self._write({"type": "trajectories", "step": step, "samples": [s.to_dict() for s in samples]})

    def emit_checkpoint(self, info: CheckpointInfo) -> None:
        if not self.metrics_only:
            self._write({"type": "checkpoint", **info.to_dict()})

    def emit_status(self, status: str, detail: dict[str, Any]) -> None:
        if not self.metrics_only:
            self._write({"type": "status", "status": status, **detail})


class FanoutSink(BaseSink):
    def __init__(self, *sinks: MetricsSink) -> None:
        self.sinks = [s for s in sinks if s is not None]

    def emit_metrics(self, metrics: RunMetrics) -> None:
        for s in self.sinks:
            s.emit_metrics(metrics)

    def emit_trajectories(self, step: int, samples: Sequence[TrajectorySample]) -> None:
        for s in self.sinks:
            s.emit_trajectories(step, samples)

    def emit_checkpoint(self, info: CheckpointInfo) -> None:
        for s in self.sinks:
            s.emit_checkpoint(info)

    def emit_status(self, status: str, detail: dict[str, Any]) -> None:
        for s in self.sinks:
            s.emit_status(status, detail)


def read_metrics(path: str | Path) -> list[RunMetrics]:
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("type", "metrics") == "metrics":
                out.append(RunMetrics.from_dict(row))
    return out


def is_correct(result: dict[str, Any]) -> bool:
    """An evaluation (``EvalResult.to_dict()``) that passed every check."""
    return result.get("status") == "passed" and bool(result.get("correct"))


def faster_than(result: dict[str, Any], baseline: str) -> bool:
    value = (result.get("speedup") or {}).get(baseline)
    return is_correct(result) and isinstance(value, int | float) and math.isfinite(value) and value > 1.0


def rollout_metrics(rollouts: Sequence[Rollout]) -> dict[str, Any]:
    """The rollout half of ``RunMetrics`` (rewards, rates, lengths, evaluator latency). An episode
    split in parts by the context policy counts once for its reward, with all its turns."""
    if not rollouts:
        return {"num_rollouts": 0}
    episodes: dict[tuple[int, int], list[Rollout]] = {}
    for r in rollouts:
        episodes.setdefault((r.group, r.index), []).append(r)
    rewards = [parts[0].outcome_reward for parts in episodes.values()]
    n_ep = len(episodes)
    mean = sum(rewards) / n_ep
    out: dict[str, Any] = {
        "num_rollouts": n_ep,
        "reward_mean": mean, "reward_max": max(rewards), "reward_min": min(rewards),
        "reward_std": (sum((x - mean) ** 2 for x in rewards) / n_ep) ** 0.5,
        "response_length_mean": sum(r.response_length for r in rollouts) / n_ep,
        "turns_mean": sum(len(r.turns) for r in rollouts) / n_ep,
    }
    outcomes = [t.outcome for r in rollouts for t in r.turns]
    turns_of = {key: [t for p in parts for t in p.turns] for key, parts in episodes.items()}
    evaluated = [turns for turns in turns_of.values() if any(t.outcome.status != "synthetic" for t in turns)]
    if evaluated:
        n = len(evaluated)

        def share(pred: Any) -> float:
            return sum(1 for turns in evaluated if any(pred(t.outcome) for t in turns)) / n

        out["pass_rate"] = share(lambda o: o.result is not None and is_correct(o.result))
        out["faster_than_eager_rate"] = share(lambda o: o.result is not None and faster_than(o.result, "eager"))
        out["faster_than_compile_rate"] = share(lambda o: o.result is not None and faster_than(o.result, "compile"))
        out["hack_rate"] = share(lambda o: o.status == "rejected")
        out["review_rate"] = share(lambda o: o.result is not None and any(
            f.get("severity") == "review" for f in o.result.get("findings", [])))
        out["format_error_rate"] = share(lambda o: o.status == "format_error")
        timed = [o for o in outcomes if o.status != "format_error"]
        out["timeout_rate"] = sum(1 for o in timed if o.timed_out) / len(timed) if timed else 0.0
        latencies = [o.latency_s for o in outcomes if o.result is not None or o.timed_out]
        if latencies:
            out["eval_latency_mean_s"] = sum(latencies) / len(latencies)
            out["eval_latency_max_s"] = max(latencies)
    return out
