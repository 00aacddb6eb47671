"""Placement: evaluator actors (one per GPU) and rollout workers, by Ray or locally.

Ray is optional (vLLM's pattern): ``import ray`` happens inside the functions that need it, and a
missing Ray is a clear error only when a config asks for it. Without Ray the same interfaces run in
this process: ``training.evaluation.make_evaluator_pool`` returns ``gpu_workers``' local pool,
``LocalRolloutWorkers`` collects with the trainer's own policy.

- evaluator actors: ``gpu_workers.workers.pool.RayPool``, one actor per GPU (``num_gpus=1``); CUDA is
  initialised inside the actor, never in the driver. ``submit`` returns a ``concurrent.futures.Future``
  like the local pool, so the rollout collector does not know which one it talks to.
- ``RayRolloutWorkers``: N actors each holding a policy copy; ``sync_weights`` broadcasts the
  trainer's state dict through the object store, ``collect`` splits the step's tasks across them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from training.data import TrainingTask
from training.rollout import Rollout, RolloutCollector

RAY_MISSING = ("Ray is not installed: `pip install 'kernelcourt[ray]'` (or `pip install ray`), or set "
               "evaluator.use_ray to false to evaluate in local processes.")


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def init_ray(address: str | None = None) -> Any:
    """Join the cluster at ``address`` or ``$RAY_ADDRESS``; without either, start a local Ray."""
    try:
        import ray
    except ImportError as exc:
        raise RuntimeError(RAY_MISSING) from exc
    if not ray.is_initialized():
        ray.init(address=address or os.environ.get("RAY_ADDRESS") or None, ignore_reinit_error=True,
                 log_to_driver=False)
    return ray


class LocalRolloutWorkers:
    """Rollouts in this process with the trainer's policy (nothing to sync)."""

    def __init__(self, collector: RolloutCollector) -> None:
        self.collector = collector

    def sync_weights(self, state_dict: dict[str, Any]) -> None:
        pass

    def collect(self, tasks: Sequence[TrainingTask], variants: dict[str, list[dict[str, Any]]] | None = None
                ) -> list[Rollout]:
        return self.collector.collect(tasks, _variants_for(variants))


def _variants_for(variants: dict[str, list[dict[str, Any]]] | None) -> Any:
    from agent.prompts import Variant

    if not variants:
        return None
    return lambda task: [Variant.from_dict(v) for v in variants.get(task.name, [])]


class _RolloutWorkerImpl:
    """Body of a Ray rollout actor: its own policy copy and collector, built from the run config."""

    def __init__(self, config: dict[str, Any], stage_index: int, pool: Any = None) -> None:
        from training.policy import PolicyGenerator, build_model, build_tokenizer
        from training.recipes import RunConfig

        self.config = RunConfig.from_dict(config)
        self.stage = self.config.stages[stage_index]
        self.tokenizer = build_tokenizer(self.config.model)
        device = "cuda" if self.config.device == "cuda" else "cpu"
        self.model = build_model(self.config.model, self.tokenizer, seed=self.config.seed).to(device)
        self.generator = PolicyGenerator(self.model, self.tokenizer)
        self.pool = pool

    def sync_weights(self, state_dict: dict[str, Any]) -> None:
        from training.policy import load_policy_state_dict

        load_policy_state_dict(self.model, state_dict)

    def collect(self, tasks: list[dict[str, Any]], variants: dict[str, list[dict[str, Any]]]) -> list[Rollout]:
        from training.evaluation import collect_settings, make_environment, make_evaluator_pool
        from training.generation import PolicyBackend

        cfg, stage = self.config, self.stage
        if self.pool is None and cfg.evaluator.kind != "synthetic":
            self.pool = make_evaluator_pool(cfg.evaluator)
        collector = RolloutCollector(
            PolicyBackend(self.generator, self.tokenizer.eos_token_id, batch_size=cfg.generation.batch_size),
            self.tokenizer, make_environment(cfg, stage, self.tokenizer, self.pool),
            settings=collect_settings(cfg, stage), seed=cfg.seed)
        return collector.collect([TrainingTask.from_dict(t) for t in tasks], _variants_for(variants))


class RayRolloutWorkers:
    """``num_workers`` rollout actors (``num_gpus_per_worker`` each) sharing the step's tasks."""

    def __init__(self, config: Any, stage_index: int, *, num_workers: int = 1, num_gpus_per_worker: float = 0.0,
                 evaluator_pool: Any = None, address: str | None = None) -> None:
        ray = init_ray(address)
        actor_cls = ray.remote(num_gpus=num_gpus_per_worker, num_cpus=1)(_RolloutWorkerImpl)
        self.workers = [actor_cls.remote(config.to_dict(), stage_index, evaluator_pool)
                        for _ in range(num_workers)]

    def sync_weights(self, state_dict: dict[str, Any]) -> None:
        import ray

        ref = ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        ray.get([w.sync_weights.remote(ref) for w in self.workers])

    def collect(self, tasks: Sequence[TrainingTask], variants: dict[str, list[dict[str, Any]]] | None = None
                ) -> list[Rollout]:
        import ray

        shares = [list(tasks[i :: len(self.workers)]) for i in range(len(self.workers))]
        refs = [w.collect.remote([t.to_dict() for t in share], variants or {})
                for w, share in zip(self.workers, shares) if share]
        out: list[Rollout] = []
        for group_offset, rollouts in enumerate(ray.get(refs)):
            for r in rollouts:  # make group ids unique across workers
                r.group = r.group * len(self.workers) + group_offset
                out.append(r)
        return out
