"""Helpers of the training-run tests (a module of its own: ``conftest`` is not importable by name
when several test directories each have one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "training" / "configs" / "tiny_cpu_grpo.json"


def tiny_overrides(steps: int = 3, checkpoint_every: int = 1) -> dict[str, Any]:
    """The smallest sizes that still run GRPO end to end: a 1-layer 32-wide byte-level Llama,
    1 task per step, 2 rollouts of 8 tokens."""
    return {
        "model": {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_layers": 1,
            "num_heads": 2,
            "max_positions": 96,
        },
        "sampling": {"max_new_tokens": 8, "max_context": 96},
        "algo": {"group_size": 2},
        "data": {"tasks_per_step": 1},
        "stages": [{"name": "grpo", "kind": "grpo", "steps": steps}],
        "checkpoint_every": checkpoint_every,
        "trajectories_per_step": 2,
    }


def metrics_dict(step: int, **fields: Any) -> dict[str, Any]:
    from training.metrics import RunMetrics

    base = dict(
        stage="grpo",
        stage_kind="grpo",
        stage_step=step,
        num_rollouts=4,
        reward_mean=0.1 * step,
        reward_max=0.2 * step,
        pass_rate=0.5,
        faster_than_eager_rate=0.25,
        faster_than_compile_rate=0.125,
        hack_rate=0.0,
        kl=0.01 * step,
        policy_loss=-0.1,
        entropy=2.0,
        response_length_mean=8.0,
        eval_latency_mean_s=0.5,
        eval_latency_max_s=0.9,
    )
    base.update(fields)
    return RunMetrics(step=step, **base).to_dict()


def sample_dict(step: int, position: int, text: str) -> dict[str, Any]:
    return {
        "step": step,
        "task": f"task_{position}",
        "group": 0,
        "index": position,
        "reward": 0.5,
        "turns": [
            {
                "text": text,
                "observation": "",
                "reward": 0.5,
                "status": "passed",
                "outcome": {"reward": 0.5, "status": "passed", "result": {"speedup": {"eager": 1.5}}},
                "action_tokens": 8,
            }
        ],
    }


def store_step(run_id: int, step: int, text=lambda step, i: f"reply {i} at step {step}") -> None:
    from webapp.training_runs import services

    services.training_metrics_store(run_id=run_id, metrics=metrics_dict(step))
    services.training_samples_store(
        run_id=run_id, step=step, samples=[sample_dict(step, i, text(step, i)) for i in range(2)]
    )
