"""Reward configs (versioned data) and the reward of one evaluation under a config."""

from __future__ import annotations

from typing import Any

from .schema import EvalResult

REWARD_CONFIGS: dict[str, dict[str, Any]] = {
    # CUDA Agent's discrete levels: -1 incorrect/rejected, 1 correct, 2 faster than eager,
    # 3 faster than both eager and torch.compile (by more than `margin`).
    "cuda_agent_levels": {"name": "cuda_agent_levels", "version": 1, "kind": "levels",
                          "floor": -1.0, "correct": 1.0, "beats_eager": 2.0, "beats_both": 3.0,
                          "margin": 0.05},
    # Kevin-32B: 0.3 * correct + speedup (speedup only when correct).
    "kevin": {"name": "kevin", "version": 1, "kind": "kevin", "floor": 0.0, "correct_weight": 0.3},
    # CUDA-L1 style: the speedup, clipped, when correct.
    "clipped_speedup": {"name": "clipped_speedup", "version": 1, "kind": "clipped", "floor": 0.0,
                        "clip_min": 0.0, "clip_max": 10.0, "baseline": "eager"},
    # 0/1 correctness (CUDA-L1's self-supervised stage).
    "correctness": {"name": "correctness", "version": 1, "kind": "binary", "floor": 0.0},
}
DEFAULT_REWARD = "cuda_agent_levels"


def reward_configs() -> dict[str, dict[str, Any]]:
    return {name: dict(cfg) for name, cfg in REWARD_CONFIGS.items()}


def resolve_reward_config(config: dict[str, Any] | str | None) -> dict[str, Any]:
    if config is None:
        return dict(REWARD_CONFIGS[DEFAULT_REWARD])
    if isinstance(config, str):
        if config not in REWARD_CONFIGS:
            raise ValueError(f"unknown reward config {config!r}; known: {sorted(REWARD_CONFIGS)}")
        return dict(REWARD_CONFIGS[config])
    kind = config.get("kind")
    if kind not in ("levels", "kevin", "clipped", "binary"):
        raise ValueError(f"reward config kind must be levels|kevin|clipped|binary, got {kind!r}")
    base = next((c for c in REWARD_CONFIGS.values() if c["kind"] == kind), {})
    return {**base, **config}


def compute_reward(result: EvalResult, config: dict[str, Any] | str | None = None) -> float:
    """Reward of a result; anything not passed (incorrect, rejected, crashed) gets the floor."""
    cfg = resolve_reward_config(config)
    floor = float(cfg.get("floor", 0.0))
    if result.status != "passed" or not result.correct:
        return floor
    # speed withheld (a finding a reviewer has to clear first): correct, and no faster than that
    eager = None if result.speed_withheld else result.speedup.get("eager")
    compile_ = None if result.speed_withheld else result.speedup.get("compile")
    kind = cfg["kind"]
    if kind == "binary":
        return 1.0
    if kind == "levels":
        margin = 1.0 + float(cfg.get("margin", 0.05))
        beats_eager = eager is not None and eager > margin
        beats_compile = compile_ is not None and compile_ > margin
        if beats_eager and beats_compile:
            return float(cfg["beats_both"])
        if beats_eager:
            return float(cfg["beats_eager"])
        return float(cfg["correct"])
    if kind == "kevin":
        return float(cfg.get("correct_weight", 0.3)) + float(eager or 0.0)
    speed = 0.0 if result.speed_withheld else (result.speedup.get(cfg.get("baseline", "eager")) or 0.0)
    return float(min(max(speed, cfg.get("clip_min", 0.0)), cfg.get("clip_max", 10.0)))
