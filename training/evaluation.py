"""Scoring a turn: the evaluator's verdict (through a bounded pool) or a synthetic reward.

A scorer's ``submit`` returns a ``Future[TurnOutcome]`` at once; the rollout collector waits for a
whole turn's futures together, each with its own deadline, so evaluations run concurrently up to
the pool's size and a hung evaluation costs one floor reward, never the step.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from training.data import TrainingTask
from training.prompting import extract_kernel
from training.rewards import RewardScheme, compute_reward


@dataclass
class TurnOutcome:
    reward: float
    status: str  # an evaluator status, or "format_error", "timeout", "eval_error", "synthetic"
    result: dict[str, Any] | None = None  # EvalResult.to_dict()
    error: str = ""
    latency_s: float = 0.0
    timed_out: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "status": self.status, "result": self.result, "error": self.error,
                "latency_s": self.latency_s, "timed_out": self.timed_out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnOutcome:
        return cls(**data)


class EvaluatorPool(Protocol):
    """``gpu_workers.workers.pool.LocalPool`` and the Ray pool both have this shape."""

    def submit(self, request: Any) -> cf.Future: ...


class ThreadEvaluatorPool:
    """Bounded parallelism around ``gpu_workers.evaluate`` (which isolates each kernel in its own
    process, so threads are enough here). Used when ``gpu_workers.workers.pool`` is not available."""

    def __init__(self, workers: int = 2, evaluate_fn: Callable[[Any], Any] | None = None) -> None:
        if evaluate_fn is None:
            from gpu_workers import evaluate as evaluate_fn
        self._evaluate = evaluate_fn
        self._executor = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="eval")

    def submit(self, request: Any) -> cf.Future:
        return self._executor.submit(self._evaluate, request)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def make_local_pool(workers: int) -> Any:
    try:
        from gpu_workers.workers.pool import LocalPool
    except ImportError:
        return ThreadEvaluatorPool(workers)
    return LocalPool(workers=workers)


class Scorer(Protocol):
    floor: float

    def submit(self, task: TrainingTask, text: str, ids: Sequence[int]) -> cf.Future: ...


def _done(outcome: TurnOutcome) -> cf.Future:
    fut: cf.Future = cf.Future()
    fut.set_result(outcome)
    return fut


class SyntheticScorer:
    """reward = share of the response's tokens (``<eos>`` excluded) equal to ``target_id``.

    A dense, cheap reward on which a tiny random model measurably learns: the learning test and the
    CPU demo recipe use it.
    """

    def __init__(self, target_id: int, eos_id: int) -> None:
        self.target_id = target_id
        self.eos_id = eos_id
        self.floor = 0.0

    def submit(self, task: TrainingTask, text: str, ids: Sequence[int]) -> cf.Future:
        body = [i for i in ids if i != self.eos_id]
        reward = sum(1 for i in body if i == self.target_id) / len(body) if body else 0.0
        return _done(TurnOutcome(reward=reward, status="synthetic"))


@dataclass
class EvaluatorScorer:
    """Extract ``ModelNew`` from the reply, evaluate it, and score the verdict under ``scheme``."""

    pool: Any
    scheme: RewardScheme
    request_fields: dict[str, Any] = field(default_factory=dict)  # device, track, trials, baselines…

    @property
    def floor(self) -> float:
        return self.scheme.floor

    def submit(self, task: TrainingTask, text: str, ids: Sequence[int]) -> cf.Future:
        source, error = extract_kernel(text)
        if source is None:
            return _done(TurnOutcome(reward=self.floor, status="format_error", error=error))
        from gpu_workers import EvalRequest

        fields = dict(self.request_fields)
        if "baselines" in fields:
            fields["baselines"] = tuple(fields["baselines"])
        request = EvalRequest(task_source=task.task_source, kernel_source=source, task_name=task.name, **fields)
        started = time.monotonic()
        outer: cf.Future = cf.Future()
        inner = self.pool.submit(request)

        def finish(f: cf.Future) -> None:
            latency = time.monotonic() - started
            if f.cancelled():
                return
            exc = f.exception()
            if exc is not None:
                outcome = TurnOutcome(reward=self.floor, status="eval_error", error=f"{type(exc).__name__}: {exc}",
                                      latency_s=latency)
            else:
                result = f.result()
                data = result if isinstance(result, dict) else result.to_dict()
                outcome = TurnOutcome(reward=compute_reward(data, self.scheme), status=str(data.get("status")),
                                      result=data, latency_s=latency)
            if not outer.done():
                outer.set_result(outcome)

        outer.inner = inner  # type: ignore[attr-defined]  # so a timed-out wait can cancel it
        inner.add_done_callback(finish)
        return outer


def wait_outcomes(futures: Sequence[cf.Future], *, timeout_s: float, floor: float) -> list[TurnOutcome]:
    """Wait for every future up to ``timeout_s`` from now; the late ones get the floor and are
    recorded as ``timeout`` (their evaluation is cancelled when it has not started)."""
    started = time.monotonic()
    cf.wait(futures, timeout=timeout_s)
    out = []
    for fut in futures:
        if fut.done():
            out.append(fut.result())
            continue
        inner = getattr(fut, "inner", None)
        if inner is not None:
            inner.cancel()
        out.append(TurnOutcome(reward=floor, status="timeout", timed_out=True,
                               error=f"evaluation did not finish within {timeout_s:g} s",
                               latency_s=time.monotonic() - started))
    return out
