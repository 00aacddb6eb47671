"""The environment a run's rollouts meet: the evaluator's pool and the agent's loop around it.

The pool is ``gpu_workers``' own (``LocalPool``: threads around the sandboxed evaluator; ``RayPool``:
one evaluator actor per GPU); the environment is ``training.rollout.AgentEnvironment`` with the
stage's reward config, or the synthetic toy environment of the CPU learning recipes; ``collect_settings``
is how the stage samples in it (the trainer's collector and Ray rollout actors alike).
"""

from __future__ import annotations

from typing import Any

from training.recipes import EvaluatorConfig, RunConfig, StageConfig
from training.rollout import AgentEnvironment, CollectSettings, SyntheticEnvironment


def make_evaluator_pool(evaluator: EvaluatorConfig) -> Any:
    """``gpu_workers.workers.pool.RayPool`` (one actor per GPU, joining ``$RAY_ADDRESS``) when
    ``evaluator.use_ray``, else ``gpu_workers.workers.pool.LocalPool`` with ``evaluator.workers`` threads
    over ``evaluator.processes`` worker processes."""
    if evaluator.use_ray:
        from gpu_workers.workers.pool import (
            RayPool,  # it joins $RAY_ADDRESS, or says clearly that Ray is missing
        )

        return RayPool(actors=None if evaluator.device == "cuda" else evaluator.workers)
    from gpu_workers.workers.pool import LocalPool

    return LocalPool(workers=evaluator.workers, processes=evaluator.processes)


def make_environment(config: RunConfig, stage: StageConfig, tokenizer: Any, pool: Any) -> Any:
    """The stage's environment; ``pool`` is ignored by the synthetic one (and may be None there)."""
    ev = config.evaluator
    algo = config.stage_algo(stage)
    if ev.kind == "synthetic":
        return SyntheticEnvironment(target_id=tokenizer.encode(ev.synthetic_target)[0],
                                    eos_id=tokenizer.eos_token_id)
    reward = config.stage_reward(stage)
    return AgentEnvironment(
        pool=pool, reward_config=reward.resolved(), device=ev.device, track=ev.track, request=dict(ev.request),
        timeout_s=ev.timeout_s, target_speedup=ev.target_speedup, target_baseline=ev.target_baseline,
        contrastive_k=max(algo.contrastive_variants, 1), no_candidate_reward=reward.no_candidate_reward,
        failure_reward=reward.failure_reward)


def collect_settings(config: RunConfig, stage: StageConfig) -> CollectSettings:
    """How the stage's rollouts are sampled: its group size, turns and per-rollout token budgets."""
    sampling = config.stage_sampling(stage)
    return CollectSettings(group_size=config.stage_algo(stage).group_size, max_turns=sampling.max_turns,
                           max_new_tokens=sampling.max_new_tokens,
                           max_context=min(sampling.max_context, config.model.max_positions),
                           temperature=sampling.temperature, top_p=sampling.top_p,
                           max_rollout_tokens=sampling.max_rollout_tokens)
