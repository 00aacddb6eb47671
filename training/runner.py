"""Run a staged recipe end to end: the one entry point for the CLI, Celery tasks and Ray drivers.

``run_training(config, out_dir=..., sink=..., cancel=..., resume=...)`` walks the stages, emits one
``RunMetrics`` per step (and sampled trajectories), checkpoints every ``checkpoint_every`` steps and
at the end of each stage, and on ``resume`` continues after the last complete checkpoint with the
same RNG state, so the deterministic parts of the metrics repeat exactly.
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from training import checkpoint as ckpt
from training.data import TrainingTask, check_contamination, ops_jsonl_tasks, suite_tasks, synthetic_tasks
from training.evaluation import EvaluatorScorer, SyntheticScorer
from training.metrics import (
    BaseSink,
    CheckpointInfo,
    FanoutSink,
    JsonlSink,
    MetricsSink,
    RunMetrics,
    TrajectorySample,
    rollout_metrics,
)
from training.policy import Generator, PolicyGenerator, Sampling, build_model, build_tokenizer, frozen_copy
from training.prompting import PromptSettings, build_prompt
from training.recipes import RL_KINDS, RunConfig, StageConfig
from training.rewards import is_correct
from training.rollout import CollectSettings, Rollout, RolloutCollector
from training.trainer import Trainer
from training.value import CriticModel

CRITIC_KINDS = ("critic_warmup", "ppo")
ROLLOUT_KINDS = ("rft", "critic_warmup", "grpo", "ppo")


class RunCancelled(Exception):
    pass


@dataclass
class RunResult:
    status: str  # "completed" | "cancelled"
    step: int
    out_dir: str
    last_checkpoint: str | None
    config_hash: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load_tasks(config: RunConfig) -> tuple[list[TrainingTask], dict[str, Any]]:
    """Training tasks from ``config.data.sources`` minus those too close to ``eval_sources``."""
    train = _from_sources(config.data.sources, config.evaluator.device)
    report: dict[str, Any] = {"refused": []}
    if config.data.eval_sources:
        evals = _from_sources(config.data.eval_sources, config.evaluator.device)
        result = check_contamination(train, {t.name: t.task_source for t in evals},
                                     threshold=config.data.contamination_threshold,
                                     method=config.data.contamination_method)
        train, report = result.kept, result.to_dict()
    if not train:
        raise ValueError("no training tasks left (check data.sources and the contamination report)")
    return train, report


def _from_sources(sources: list[dict[str, Any]], device: str) -> list[TrainingTask]:
    out: list[TrainingTask] = []
    for src in sources:
        kind = src.get("kind")
        if kind == "suite":
            out += suite_tasks(device, src.get("names"))
        elif kind == "jsonl":
            out += ops_jsonl_tasks(src["path"])
        elif kind == "synthetic":
            out += synthetic_tasks(int(src.get("n", 4)))
        else:
            raise ValueError(f"unknown data source kind {kind!r}")
    return out


class _Run:
    def __init__(self, config: RunConfig, out_dir: Path, sink: MetricsSink, generator: Generator | None,
                 scorer_factory: Callable[[RunConfig, StageConfig, Any], Any] | None) -> None:
        self.config = config
        self.out_dir = out_dir
        self.sink = sink
        self.tokenizer = build_tokenizer(config.model)
        self.policy = build_model(config.model, self.tokenizer, seed=config.seed).to(config.device)
        self.trainer = Trainer(self.policy, optim=config.optim, pad_id=self.tokenizer.pad_token_id,
                               device=config.device)
        self.generator = generator or PolicyGenerator(self.policy, self.tokenizer)
        self.scorer_factory = scorer_factory
        self.tasks, self.contamination = load_tasks(config)
        self.pool: Any = None
        self.state = ckpt.RunState()
        self._workers: Any = None
        self._workers_stage: StageConfig | None = None

    # -- pieces ---------------------------------------------------------------------------------------------
    def scorer(self, stage: StageConfig) -> Any:
        if self.scorer_factory is not None:
            return self.scorer_factory(self.config, stage, self.tokenizer)
        ev = self.config.evaluator
        if ev.kind == "synthetic":
            return SyntheticScorer(self.tokenizer.encode(ev.synthetic_target)[0], self.tokenizer.eos_token_id)
        if self.pool is None:
            from training.distributed import make_evaluator_pool

            self.pool = make_evaluator_pool(ev)
        fields = {"device": ev.device, "track": ev.track, **ev.request}
        return EvaluatorScorer(self.pool, self.config.stage_reward(stage), fields)

    def step_tasks(self, step: int) -> list[TrainingTask]:
        rng = random.Random(self.config.seed * 1_000_003 + step)
        k = min(self.config.data.tasks_per_step, len(self.tasks))
        return rng.sample(self.tasks, k)

    def prompts(self) -> PromptSettings:
        ev = self.config.evaluator
        return PromptSettings(style=self.config.data.prompt_style, device=ev.device, track=ev.track)

    def collector(self, stage: StageConfig) -> RolloutCollector:
        cfg = self.config
        sampling = cfg.stage_sampling(stage)
        algo = cfg.stage_algo(stage)
        return RolloutCollector(
            self.generator, self.tokenizer, self.scorer(stage),
            sampling=Sampling(sampling.temperature, sampling.top_p, sampling.max_new_tokens),
            settings=CollectSettings(group_size=algo.group_size, max_turns=sampling.max_turns,
                                     stop_on_pass=sampling.stop_on_pass, eval_timeout_s=cfg.evaluator.timeout_s,
                                     max_context=min(sampling.max_context, cfg.model.max_positions)),
            prompts=self.prompts(),
        )

    def ray_workers(self, stage: StageConfig) -> Any:
        """Ray rollout actors for this stage (placed once per stage, reused every step)."""
        if self._workers_stage is not stage:
            from training.distributed import RayRolloutWorkers

            index = self.config.stages.index(stage)
            self._workers = RayRolloutWorkers(self.config, index, num_workers=self.config.rollout_workers,
                                              num_gpus_per_worker=self.config.rollout_worker_gpus,
                                              evaluator_pool=None)
            self._workers_stage = stage
        return self._workers

    # -- contrastive exemplars (CUDA-L1) -----------------------------------------------------------------------
    def variants_for(self, k: int) -> Callable[[TrainingTask], list[dict[str, Any]]] | None:
        if k <= 0:
            return None
        buffer = self.state.extra.setdefault("exemplars", {})

        def pick(task: TrainingTask) -> list[dict[str, Any]]:
            found = sorted(buffer.get(task.name, []), key=lambda v: -(v["speedup"] or 0.0))[:k]
            return sorted(found, key=lambda v: v["speedup"] or 0.0)

        return pick

    def remember(self, rollouts: list[Rollout]) -> None:
        buffer = self.state.extra.setdefault("exemplars", {})
        for r in rollouts:
            for t in r.turns:
                res = t.outcome.result
                if res is None or not is_correct(res):
                    continue
                from training.prompting import extract_kernel

                source, _ = extract_kernel(t.text)
                if source:
                    entries = buffer.setdefault(r.task_name, [])
                    entries.append({"source": source, "speedup": (res.get("speedup") or {}).get("eager"),
                                    "status": "passed"})
                    del entries[:-32]

    # -- model lifecycle ------------------------------------------------------------------------------------
    def ref_path(self, stage_index: int) -> Path:
        return self.out_dir / "refs" / f"stage_{stage_index}.pt"

    def enter_stage(self, index: int, stage: StageConfig, resumed_mid_stage: bool) -> None:
        cfg = self.config
        self.trainer.set_optim(cfg.stage_optim(stage))
        algo = cfg.stage_algo(stage)
        self.trainer.ref = None
        if stage.kind in RL_KINDS and algo.kl_coef > 0:
            ref = frozen_copy(self.policy)
            path = self.ref_path(index)
            if resumed_mid_stage and path.exists():
                ref.load_state_dict(torch.load(path, map_location="cpu"))
            else:  # the reference is the policy as the stage begins (e.g. after SFT/RFT)
                path.parent.mkdir(parents=True, exist_ok=True)
                torch.save(ref.state_dict(), path)
            self.trainer.ref = ref
        if stage.kind in CRITIC_KINDS and self.trainer.critic is None:
            # CUDA Agent initialises the critic from the policy as it stands when the critic is needed.
            self.trainer.attach_critic(CriticModel(copy.deepcopy(self.policy)).to(cfg.device))
            self.trainer.set_optim(cfg.stage_optim(stage))

    def modules(self) -> dict[str, Any]:
        t = self.trainer
        return {"policy": t.policy, "policy_opt": t.policy_opt, "critic": t.critic, "critic_opt": t.critic_opt}

    def save(self) -> Path:
        path = ckpt.save_checkpoint(self.out_dir, state=self.state, config=self.config.to_dict(),
                                    modules=self.modules(), keep=self.config.keep_checkpoints)
        stage = self.config.stages[min(self.state.stage_index, len(self.config.stages) - 1)]
        self.sink.emit_checkpoint(CheckpointInfo(step=self.state.step, stage=stage.name, path=str(path),
                                                 config_hash=self.config.config_hash()))
        return path

    def restore(self, path: Path) -> None:
        state, _ = ckpt.load_checkpoint(path)
        ckpt.load_into(path, "policy", self.policy)
        ckpt.load_into(path, "policy_opt", self.trainer.policy_opt)
        if (path / "critic.pt").exists():
            if self.trainer.critic is None:
                self.trainer.attach_critic(CriticModel(copy.deepcopy(self.policy)).to(self.config.device))
            ckpt.load_into(path, "critic", self.trainer.critic)
            ckpt.load_into(path, "critic_opt", self.trainer.critic_opt)
        ckpt.restore_rng(path)
        self.state = state

    # -- one step ------------------------------------------------------------------------------------------
    def run_step(self, stage: StageConfig) -> tuple[RunMetrics, list[Rollout]]:
        cfg = self.config
        algo = cfg.stage_algo(stage)
        sampling = cfg.stage_sampling(stage)
        step = self.state.step + 1
        started = time.monotonic()
        tasks = self.step_tasks(step)
        rollouts: list[Rollout] = []
        stats: dict[str, Any] = {}
        if stage.kind == "sft":
            stats = self.trainer.sft_step(self.sft_sequences(tasks))
        else:
            variants = self.variants_for(algo.contrastive_variants) if stage.kind == "grpo" else None
            if cfg.rollout_workers > 0:
                workers = self.ray_workers(stage)
                workers.sync_weights(self.policy.state_dict())
                rollouts = workers.collect(tasks)
            else:
                rollouts = self.collector(stage).collect(tasks, variants)
            norm_length = sampling.max_new_tokens * sampling.max_turns
            if stage.kind == "rft":
                kept = [r for r in rollouts if r.outcome_reward >= algo.rft_min_reward]
                stats = self.trainer.sft_step([(r.token_ids(), r.action_mask(), r.turn_spans()) for r in kept])
                stats["kept_for_sft"] = len(kept)
            elif stage.kind == "grpo":
                stats = self.trainer.grpo_step(rollouts, algo, temperature=sampling.temperature,
                                               norm_length=norm_length)
            else:
                stats = self.trainer.ppo_step(rollouts, algo, temperature=sampling.temperature,
                                              norm_length=norm_length, update_policy=stage.kind == "ppo")
            if algo.contrastive_variants > 0:
                self.remember(rollouts)
        metrics = RunMetrics(step=step, stage=stage.name, stage_kind=stage.kind,
                             stage_step=self.state.stage_step + 1, lr=self.trainer.policy_opt.param_groups[0]["lr"],
                             **rollout_metrics(rollouts),
                             **{k: v for k, v in stats.items() if k in RunMetrics.__dataclass_fields__})
        metrics.step_time_s = time.monotonic() - started
        return metrics, rollouts

    def sft_sequences(self, tasks: list[TrainingTask]) -> list[tuple[list[int], list[int], list[tuple[int, int]]]]:
        out = []
        with_ref = [t for t in tasks if t.reference_kernel] or [t for t in self.tasks if t.reference_kernel]
        if not with_ref:
            raise ValueError("an sft stage needs training tasks with reference kernels")
        for task in with_ref[: len(tasks)]:
            system, user = build_prompt(task, self.prompts())
            prompt = self.tokenizer.prompt_ids(system, user)
            response = self.tokenizer.encode(f"```python\n{task.reference_kernel.rstrip()}\n```") + [
                self.tokenizer.eos_token_id]
            limit = min(self.config.sampling.max_context, self.config.model.max_positions)
            ids = (prompt + response)[:limit]
            mask = ([0] * len(prompt) + [1] * len(response))[:limit]
            out.append((ids, mask, [(len(prompt), len(ids))]))
        return out


def _truncate_jsonl(path: Path, max_step: int) -> None:
    if not path.exists():
        return
    kept = [line for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and json.loads(line).get("step", 0) <= max_step]
    path.write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def run_training(
    config: RunConfig, *, out_dir: str | Path, sink: MetricsSink | None = None,
    cancel: Callable[[], bool] | None = None, resume: bool = False,
    generator: Generator | None = None,
    scorer_factory: Callable[[RunConfig, StageConfig, Any], Any] | None = None,
) -> RunResult:
    """Run (or resume) ``config`` writing into ``out_dir``; see the module docstring.

    ``cancel`` is polled before every step; when it returns True the run checkpoints and returns
    ``status="cancelled"`` (resume continues from there). ``generator`` and ``scorer_factory`` replace
    the policy's sampler and the reward (tests, scripted baselines).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    np.random.seed(config.seed % 2**32)
    random.seed(config.seed)
    metrics_path, traj_path = out / "metrics.jsonl", out / "trajectories.jsonl"
    latest = ckpt.latest_checkpoint(out) if resume else None
    if latest is not None:
        stored = ckpt.load_checkpoint(latest)[1]
        if stored != config.to_dict():
            changed = sorted(k for k in set(stored) | set(config.to_dict())
                             if stored.get(k) != config.to_dict().get(k))
            raise ValueError(f"cannot resume {out}: the config differs from its checkpoint's in {changed}; "
                             "start a new run directory (configs are stored with the numbers they made)")
    if resume and latest is None and metrics_path.exists():
        metrics_path.unlink()  # nothing to resume from: start over cleanly
    if not resume:
        for p in (metrics_path, traj_path):
            if p.exists():
                p.unlink()
    (out / "config.json").write_text(config.to_json() + "\n", encoding="utf-8")
    with metrics_path.open("a", encoding="utf-8") as mf, traj_path.open("a", encoding="utf-8") as tf:
        file_sink = _FileSink(JsonlSink(mf, metrics_only=True), JsonlSink(tf))
        all_sinks = FanoutSink(file_sink, sink or BaseSink())
        run = _Run(config, out, all_sinks, generator, scorer_factory)
        (out / "contamination.json").write_text(json.dumps(run.contamination, indent=2), encoding="utf-8")
        if latest is not None:
            run.restore(latest)
            _truncate_jsonl(metrics_path, run.state.step)
            _truncate_jsonl(traj_path, run.state.step)
        all_sinks.emit_status("running", {"step": run.state.step, "resumed": latest is not None,
                                          "config_hash": config.config_hash()})
        last_ckpt: Path | None = latest
        try:
            while run.state.stage_index < len(config.stages):
                index = run.state.stage_index
                stage = config.stages[index]
                run.enter_stage(index, stage, resumed_mid_stage=run.state.stage_step > 0)
                while run.state.stage_step < stage.steps:
                    if cancel is not None and cancel():
                        raise RunCancelled
                    metrics, rollouts = run.run_step(stage)
                    run.state.step += 1
                    run.state.stage_step += 1
                    all_sinks.emit_metrics(metrics)
                    samples = [TrajectorySample.from_rollout(metrics.step, r)
                               for r in rollouts[: config.trajectories_per_step]]
                    if samples:
                        all_sinks.emit_trajectories(metrics.step, samples)
                    end_of_stage = run.state.stage_step >= stage.steps
                    if end_of_stage:
                        run.state.stage_index += 1
                        run.state.stage_step = 0
                    if end_of_stage or run.state.step % max(1, config.checkpoint_every) == 0:
                        last_ckpt = run.save()
                    if end_of_stage:
                        break
                if stage.steps == 0:
                    run.state.stage_index += 1
        except RunCancelled:
            if last_ckpt is None or ckpt.load_checkpoint(last_ckpt)[0].step != run.state.step:
                last_ckpt = run.save()
            all_sinks.emit_status("cancelled", {"step": run.state.step})
            return RunResult("cancelled", run.state.step, str(out), str(last_ckpt), config.config_hash())
        except BaseException as exc:
            all_sinks.emit_status("failed", {"step": run.state.step, "error": f"{type(exc).__name__}: {exc}"})
            raise
        finally:
            if run.pool is not None and hasattr(run.pool, "shutdown"):
                run.pool.shutdown()
        all_sinks.emit_status("completed", {"step": run.state.step})
        return RunResult("completed", run.state.step, str(out), str(last_ckpt) if last_ckpt else None,
                         config.config_hash())


class _FileSink(BaseSink):
    """metrics.jsonl gets metrics; trajectories.jsonl gets trajectories, checkpoints and statuses."""

    def __init__(self, metrics: JsonlSink, rest: JsonlSink) -> None:
        self.metrics, self.rest = metrics, rest

    def emit_metrics(self, metrics: RunMetrics) -> None:
        self.metrics.emit_metrics(metrics)

    def emit_trajectories(self, step: int, samples: Any) -> None:
        self.rest.emit_trajectories(step, samples)

    def emit_checkpoint(self, info: CheckpointInfo) -> None:
        self.rest.emit_checkpoint(info)

    def emit_status(self, status: str, detail: dict[str, Any]) -> None:
        self.rest.emit_status(status, detail)
