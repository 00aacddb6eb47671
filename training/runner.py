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

from agent.prompts import Variant, system_prompt, task_prompt
from training import checkpoint as ckpt
from training.data import (
    TrainingTask,
    check_contamination,
    ops_jsonl_tasks,
    suite_tasks,
    synthetic_tasks,
    variants_jsonl_tasks,
)
from training.evaluation import collect_settings, make_environment, make_evaluator_pool
from training.exemplars import ExemplarStore
from training.generation import GenerationBackend, OpenAICompletionsBackend, PolicyBackend
from training.metrics import (
    BaseSink,
    CheckpointInfo,
    FanoutSink,
    JsonlSink,
    MetricsSink,
    RunMetrics,
    TrajectorySample,
    is_correct,
    rollout_metrics,
)
from training.policy import (
    Generator,
    PolicyGenerator,
    PolicyWeights,
    build_model,
    build_tokenizer,
    frozen_copy,
    policy_state_dict,
)
from training.recipes import RL_KINDS, RunConfig, StageConfig
from training.rollout import Rollout, RolloutCollector
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
        elif kind == "variants_jsonl":
            out += variants_jsonl_tasks(src["path"])
        elif kind == "synthetic":
            out += synthetic_tasks(int(src.get("n", 4)))
        else:
            raise ValueError(f"unknown data source kind {kind!r}")
    return out


SftSequence = tuple[list[int], list[int], list[tuple[int, int]]]  # token ids, action mask, turn spans


class _Run:
    def __init__(self, config: RunConfig, out_dir: Path, sink: MetricsSink, generator: Generator | None,
                 environment_factory: Callable[[RunConfig, StageConfig, Any], Any] | None,
                 backend: GenerationBackend | None = None) -> None:
        self.config = config
        self.out_dir = out_dir
        self.sink = sink
        self.tokenizer = build_tokenizer(config.model)
        self.policy = build_model(config.model, self.tokenizer, seed=config.seed).to(config.device)
        self.trainer = Trainer(self.policy, optim=config.optim, pad_id=self.tokenizer.pad_token_id,
                               device=config.device)
        self.backend: GenerationBackend = backend or self.make_backend(generator)
        self.environment_factory = environment_factory
        self.tasks, self.contamination = load_tasks(config)
        self.pool: Any = None
        self.state = ckpt.RunState()
        self._workers: Any = None
        self._workers_stage: StageConfig | None = None
        self._rft: tuple[int, list[SftSequence]] | None = None  # (stage index, kept trajectories)

    # -- pieces ---------------------------------------------------------------------------------------------
    def make_backend(self, generator: Generator | None) -> GenerationBackend:
        gen = self.config.generation
        if gen.kind == "openai" and generator is None:
            return OpenAICompletionsBackend(gen.base_url, gen.model, eos_token_id=self.tokenizer.eos_token_id,
                                            timeout_s=gen.timeout_s, concurrency=gen.concurrency,
                                            weights_dir=gen.weights_dir, reload_path=gen.reload_path,
                                            reload_key=gen.reload_key)
        return PolicyBackend(generator or PolicyGenerator(self.policy, self.tokenizer), self.tokenizer.eos_token_id,
                             batch_size=gen.batch_size)

    def environment(self, stage: StageConfig) -> Any:
        if self.environment_factory is not None:
            return self.environment_factory(self.config, stage, self.tokenizer)
        if self.pool is None and self.config.evaluator.kind != "synthetic":
            self.pool = make_evaluator_pool(self.config.evaluator)
        return make_environment(self.config, stage, self.tokenizer, self.pool)

    def step_tasks(self, step: int, round_no: int = 0) -> list[TrainingTask]:
        rng = random.Random(self.config.seed * 1_000_003 + step * 101 + round_no)
        k = min(self.config.data.tasks_per_step, len(self.tasks))
        return rng.sample(self.tasks, k)

    def collector(self, stage: StageConfig) -> RolloutCollector:
        return RolloutCollector(self.backend, self.tokenizer, self.environment(stage),
                                settings=collect_settings(self.config, stage), seed=self.config.seed + self.state.step)

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

    def collect(self, stage: StageConfig, tasks: list[TrainingTask]) -> list[Rollout]:
        k = self.config.stage_algo(stage).contrastive_variants
        store = self.exemplars()

        def variants_for(task: TrainingTask) -> list[Variant]:
            return store.variants(task.name) if k > 0 else []

        if self.config.rollout_workers > 0:
            workers = self.ray_workers(stage)
            workers.sync_weights(policy_state_dict(self.policy))
            rollouts = workers.collect(tasks, {t.name: [v.to_dict() for v in variants_for(t)] for t in tasks})
        else:
            rollouts = self.collector(stage).collect(tasks, variants_for)
        self.remember(rollouts)
        return rollouts

    # -- the exemplar store (CUDA-L1), one for the whole run ----------------------------------------------------
    def exemplars(self) -> ExemplarStore:
        return ExemplarStore(self.state.extra.get("exemplars"))

    def remember(self, rollouts: list[Rollout]) -> None:
        store = self.exemplars()
        for r in rollouts:
            for t in r.turns:
                res = t.outcome.result
                if res is not None and is_correct(res) and t.outcome.kernel_source:
                    store.add(r.task_name, t.outcome.kernel_source, (res.get("speedup") or {}).get("eager"))
        self.state.extra["exemplars"] = store.to_dict()

    def remember_variants(self, tasks: list[TrainingTask]) -> None:
        store = self.exemplars()
        for task in tasks:
            store.add_many(task.name, task.variants)
        self.state.extra["exemplars"] = store.to_dict()

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
        fresh_critic = stage.kind == "critic_warmup" and not resumed_mid_stage
        if stage.kind in CRITIC_KINDS and (self.trainer.critic is None or fresh_critic):
            self.attach_fresh_critic()
            self.trainer.set_optim(cfg.stage_optim(stage))
        if stage.kind == "sft" and not resumed_mid_stage:
            self.remember_variants(self.tasks)

    def attach_fresh_critic(self) -> None:
        """The critic starts as the policy as it stands: at a critic warm-up, the actor after the stages
        before it (CUDA Agent: the post-RFT actor), never the base model. A LoRA policy's critic shares
        its base through a second adapter that starts as a copy of the policy's (one copy of the base
        weights in memory); a fully trained policy's critic is a copy of its decoder."""
        old = self.trainer.critic
        if self.config.model.lora_rank > 0:
            if old is not None:
                old.release()  # its adapter leaves the policy; the fresh one takes its name
            critic = CriticModel.sharing(self.policy)
        else:
            critic = CriticModel(copy.deepcopy(self.policy))
        self.trainer.attach_critic(critic.to(self.config.device))

    def modules(self) -> dict[str, Any]:
        t = self.trainer
        # policy.pt holds the policy's own weights only (a shared critic's adapter is in critic.pt), so
        # export and the Ray rollout actors load it into a freshly built model of the run's spec.
        return {"policy": PolicyWeights(t.policy), "policy_opt": t.policy_opt, "critic": t.critic,
                "critic_opt": t.critic_opt}

    def save(self) -> Path:
        path = ckpt.save_checkpoint(self.out_dir, state=self.state, config=self.config.to_dict(),
                                    modules=self.modules(), keep=self.config.keep_checkpoints)
        stage = self.config.stages[min(self.state.stage_index, len(self.config.stages) - 1)]
        self.sink.emit_checkpoint(CheckpointInfo(step=self.state.step, stage=stage.name, path=str(path),
                                                 config_hash=self.config.config_hash()))
        return path

    def restore(self, path: Path) -> None:
        state, _ = ckpt.load_checkpoint(path)
        ckpt.load_into(path, "policy", PolicyWeights(self.policy))
        ckpt.load_into(path, "policy_opt", self.trainer.policy_opt)
        if (path / "critic.pt").exists():
            if self.trainer.critic is None:
                self.attach_fresh_critic()  # its weights come from the checkpoint next
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
        rollouts: list[Rollout] = []
        stats: dict[str, Any] = {}
        if stage.kind == "sft":
            stats = self.trainer.sft_step(self.sft_sequences(self.step_tasks(step)))
        elif stage.kind == "rft":
            rollouts, dataset = self.rft_dataset(stage)
            stats = self.trainer.sft_step(self.rft_batch(dataset, algo.rft_batch_size))
            stats["kept_for_sft"] = len(dataset)
        else:
            rollouts = self.collect(stage, self.step_tasks(step))
            norm_length = sampling.max_new_tokens * sampling.max_turns
            if stage.kind == "grpo":
                stats = self.trainer.grpo_step(rollouts, algo, temperature=sampling.temperature,
                                               norm_length=norm_length)
            else:
                stats = self.trainer.ppo_step(rollouts, algo, temperature=sampling.temperature,
                                              norm_length=norm_length, update_policy=stage.kind == "ppo")
        if stage.kind != "critic_warmup":
            self.backend.sync_weights(self.policy, step)  # the server samples the updated policy next
        metrics = RunMetrics(step=step, stage=stage.name, stage_kind=stage.kind,
                             stage_step=self.state.stage_step + 1, lr=self.trainer.policy_opt.param_groups[0]["lr"],
                             **rollout_metrics(rollouts),
                             **{k: v for k, v in stats.items() if k in RunMetrics.__dataclass_fields__})
        metrics.step_time_s = time.monotonic() - started
        return metrics, rollouts

    # -- RFT: offline epochs over the kept trajectories ---------------------------------------------------------
    def rft_path(self, index: int) -> Path:
        return self.out_dir / "rft" / f"stage_{index}.json"

    def rft_dataset(self, stage: StageConfig) -> tuple[list[Rollout], list[SftSequence]]:
        """At the stage's first step: sample ``rft_collect_rounds`` rounds with the policy as it stands
        and keep the trajectories whose episode reward reaches ``rft_min_reward`` (every part of a
        kept episode). Stored in the run directory, so a resumed stage trains on the same data."""
        index = self.state.stage_index
        if self._rft is not None and self._rft[0] == index:
            return [], self._rft[1]
        path = self.rft_path(index)
        if self.state.stage_step > 0 and path.exists():
            rows = json.loads(path.read_text(encoding="utf-8"))
            self._rft = (index, [(r["ids"], r["mask"], [tuple(s) for s in r["spans"]]) for r in rows])
            return [], self._rft[1]
        algo = self.config.stage_algo(stage)
        rollouts: list[Rollout] = []
        for round_no in range(algo.rft_collect_rounds):
            rollouts += self.collect(stage, self.step_tasks(self.state.step + 1, round_no))
        kept = [(r.token_ids(), r.action_mask(), r.turn_spans()) for r in rollouts
                if r.outcome_reward >= algo.rft_min_reward and r.turns]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([{"ids": i, "mask": m, "spans": s} for i, m, s in kept]), encoding="utf-8")
        self._rft = (index, kept)
        return rollouts, kept

    def rft_batch(self, dataset: list[SftSequence], size: int) -> list[SftSequence]:
        """The stage step's slice of the dataset; every epoch is a fresh seeded permutation."""
        if not dataset:
            return []
        n = len(dataset)
        out = []
        for position in range(self.state.stage_step * size, (self.state.stage_step + 1) * size):
            epoch, offset = divmod(position, n)
            order = list(range(n))
            random.Random(self.config.seed * 31 + self.state.stage_index * 1009 + epoch).shuffle(order)
            out.append(dataset[order[offset]])
            if len(out) == n:
                break  # a batch never holds one trajectory twice
        return out

    # -- SFT on correct kernels ------------------------------------------------------------------------------
    def sft_sequences(self, tasks: list[TrainingTask]) -> list[SftSequence]:
        """Each task's known correct kernels as replies to the agent's first prompt."""
        with_kernels = [t for t in tasks if t.sft_kernels()] or [t for t in self.tasks if t.sft_kernels()]
        if not with_kernels:
            raise ValueError("an sft stage needs training tasks with correct kernels (reference kernels or a "
                             "'variants_jsonl' source); none of the run's tasks has one")
        ev = self.config.evaluator
        limit = min(self.config.sampling.max_context, self.config.model.max_positions)
        system = system_prompt(track=ev.track, device=ev.device)
        out: list[SftSequence] = []
        for task in with_kernels[: len(tasks)]:
            prompt = self.tokenizer.prompt_ids(
                system, task_prompt(task.task_source, task_name=task.name, device=ev.device, track=ev.track))
            for kernel in task.sft_kernels():
                response = self.tokenizer.encode(f"```python\n{kernel.rstrip()}\n```") + [self.tokenizer.eos_token_id]
                ids = (prompt + response)[:limit]
                if len(ids) <= len(prompt):
                    continue  # the prompt alone fills the context: nothing to learn from
                mask = [0] * len(prompt) + [1] * (len(ids) - len(prompt))
                out.append((ids, mask, [(len(prompt), len(ids))]))
        if not out:
            raise ValueError(f"no SFT example fits in {limit} tokens: raise sampling.max_context / "
                             "model.max_positions")
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
    environment_factory: Callable[[RunConfig, StageConfig, Any], Any] | None = None,
    backend: GenerationBackend | None = None,
) -> RunResult:
    """Run (or resume) ``config`` writing into ``out_dir``; see the module docstring.

    ``cancel`` is polled before every step; when it returns True the run checkpoints and returns
    ``status="cancelled"`` (resume continues from there). ``generator`` replaces the policy's sampler
    (tests, scripted baselines), ``backend`` the whole generation backend (e.g. a vLLM server:
    ``training.generation``), ``environment_factory(config, stage, tokenizer)`` the environment.
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
        run = _Run(config, out, all_sinks, generator, environment_factory, backend)
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
