"""Reward schemes: one evaluator verdict in, one scalar out.

The evaluator computes its own ``reward`` under its reward config; training recomputes the scalar
from the verdict under the run's scheme so that a recipe alone decides what is optimised, and so
that a hack (status ``rejected``) always lands on the scheme's floor whatever the evaluator's config.

Schemes (all take an ``EvalResult`` or its ``to_dict()``; ``None`` means "no kernel could be
extracted from the response" and also gets the floor):

- ``cuda_agent``: CUDA Agent's discrete reward. −1 if wrong, failed or a hack; 3 if faster than both
  eager and ``torch.compile`` by more than ``margin``; 2 if faster than eager only; 1 if merely
  correct. A raw speedup reward taught CUDA Agent's policy to chase outliers; the tiers did not.
- ``kevin``: Kevin-32B's ``0.3 · correct + speedup`` (0 when incorrect).
- ``clipped_speedup``: ``min(speedup, cap)`` when correct, 0 otherwise.
- ``correctness``: 0/1, CUDA-L1's self-supervised stage.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

SCHEMES = ("cuda_agent", "kevin", "clipped_speedup", "correctness")
REWARD_SCHEME_VERSION = "1"

_DEFAULT_PARAMS: dict[str, dict[str, float | str]] = {
    "cuda_agent": {"margin": 1.05, "floor": -1.0},
    "kevin": {"correct_bonus": 0.3, "baseline": "eager", "floor": 0.0},
    "clipped_speedup": {"cap": 10.0, "baseline": "eager", "floor": 0.0},
    "correctness": {"floor": 0.0},
}


@dataclass
class RewardScheme:
    """A reward scheme as data: ``name`` picks the formula, ``params`` override its defaults."""

    name: str = "cuda_agent"
    params: dict[str, Any] = field(default_factory=dict)
    version: str = REWARD_SCHEME_VERSION

    def __post_init__(self) -> None:
        if self.name not in SCHEMES:
            raise ValueError(f"unknown reward scheme {self.name!r}; choose from {SCHEMES}")
        unknown = sorted(set(self.params) - set(_DEFAULT_PARAMS[self.name]))
        if unknown:
            raise ValueError(f"unknown params {unknown} for reward scheme {self.name!r}")

    def param(self, key: str) -> Any:
        return self.params.get(key, _DEFAULT_PARAMS[self.name][key])

    @property
    def floor(self) -> float:
        return float(self.param("floor"))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardScheme:
        return cls(name=data.get("name", "cuda_agent"), params=dict(data.get("params", {})),
                   version=str(data.get("version", REWARD_SCHEME_VERSION)))

    def __call__(self, result: Any) -> float:
        return compute_reward(result, self)


def _as_dict(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    if isinstance(result, dict):
        return result
    return result.to_dict()


def _speedup(data: dict[str, Any], baseline: str) -> float | None:
    value = (data.get("speedup") or {}).get(baseline)
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def is_hack(result: Any) -> bool:
    """An integrity rule rejected the kernel."""
    data = _as_dict(result)
    return data is not None and data.get("status") == "rejected"


def is_correct(result: Any) -> bool:
    data = _as_dict(result)
    return data is not None and data.get("status") == "passed" and bool(data.get("correct"))


def faster_than(result: Any, baseline: str, margin: float = 1.0) -> bool:
    data = _as_dict(result)
    if data is None or not is_correct(data):
        return False
    speedup = _speedup(data, baseline)
    return speedup is not None and speedup > margin


def compute_reward(result: Any, scheme: RewardScheme) -> float:
    """The scalar reward of one evaluation under ``scheme`` (hacks and failures at the floor)."""
    data = _as_dict(result)
    if data is None or not is_correct(data):
        return scheme.floor
    if scheme.name == "cuda_agent":
        margin = float(scheme.param("margin"))
        beats_eager = faster_than(data, "eager", margin)
        beats_compile = faster_than(data, "compile", margin)
        if beats_eager and beats_compile:
            return 3.0
        if beats_eager:
            return 2.0
        return 1.0
    if scheme.name == "kevin":
        speedup = _speedup(data, str(scheme.param("baseline"))) or 0.0
        return float(scheme.param("correct_bonus")) + speedup
    if scheme.name == "clipped_speedup":
        speedup = _speedup(data, str(scheme.param("baseline"))) or 0.0
        return min(speedup, float(scheme.param("cap")))
    if scheme.name == "correctness":
        return 1.0
    raise AssertionError(scheme.name)  # unreachable: __post_init__ validated the name
