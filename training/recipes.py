"""Recipes as data: a versioned ``RunConfig`` holds every hyperparameter of a staged run.

A run is a list of stages, each of one kind:

- ``sft``: supervised fine-tuning on correct kernels (CUDA-L1 stage 1: a JSONL of correct variants
  per task, ``{"kind": "variants_jsonl"}``; or the suite's reference kernels);
- ``rft``: rejection fine-tuning as offline epochs: at the stage's start, sample
  ``rft_collect_rounds`` rounds of multi-turn agent trajectories with the policy as it stands, keep
  those whose reward ≥ ``rft_min_reward``, then every step is one optimiser step on the next
  ``rft_batch_size`` of them, reshuffled every epoch (CUDA Agent's RFT; with the 0/1
  ``correctness`` reward it is CUDA-L1's self-supervised stage);
- ``critic_warmup``: a fresh critic copied from the policy as it stands (the post-RFT actor),
  trained alone on the frozen policy's rollouts (CUDA Agent; the recipe uses λ = 1 so the targets
  are the Monte-Carlo returns, as VAPO pretrains its value model);
- ``grpo``: group-relative policy optimisation, no critic (Kevin, CUDA-L1); with
  ``contrastive_variants > 0`` the prompt carries earlier kernels and their speedups (CUDA-L1's
  contrastive RL);
- ``ppo``: PPO with a critic and GAE over action tokens (CUDA Agent's agentic stage).

Stages override the run's ``algo`` / ``sampling`` / ``optim`` / ``reward`` with small dicts. The
config is written next to the run (``config.json``) and inside every checkpoint.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_workers.reward import resolve_reward_config
from training.losses import KL_ESTIMATORS, LOSS_AGGREGATIONS
from training.policy import ModelSpec

RUN_CONFIG_VERSION = 2  # 2: reward is a gpu_workers reward config (RewardConfig), generation backends
STAGE_KINDS = ("sft", "rft", "critic_warmup", "grpo", "ppo")
RL_KINDS = ("grpo", "ppo")
CONFIGS_DIR = Path(__file__).parent / "configs"


@dataclass
class AlgoConfig:
    group_size: int = 4  # G rollouts per task
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_mode: str = "loss"  # "loss": β·KL in the objective (GRPO); "reward": −β·k1 per token (PPO)
    entropy_coef: float = 0.0
    scale_rewards_by_std: bool = True  # False: Dr.GRPO
    loss_aggregation: str = "seq_mean_token_mean"  # Dr.GRPO: "seq_mean_token_sum_norm"
    turn_credit: str = "outcome"  # "outcome": best turn's reward; "discounted": per turn with turn_gamma
    turn_gamma: float = 0.4  # Kevin-32B
    gamma: float = 1.0  # GAE over action tokens (CUDA Agent)
    lam: float = 0.95
    whiten_advantages: bool = True  # PPO
    value_clip: float | None = 0.2
    ppo_epochs: int = 1
    minibatch_size: int = 0  # rollouts per optimiser step; 0: the whole batch
    rft_min_reward: float = 1.0
    rft_collect_rounds: int = 1  # rounds of tasks_per_step tasks × group_size sampled at an rft stage's start
    rft_batch_size: int = 8  # kept trajectories (parts) per rft optimiser step
    contrastive_variants: int = 0  # k exemplars in the prompt (CUDA-L1), sampled across speed buckets

    def __post_init__(self) -> None:
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator must be one of {KL_ESTIMATORS}")
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise ValueError(f"loss_aggregation must be one of {LOSS_AGGREGATIONS}")
        if self.kl_mode not in ("loss", "reward"):
            raise ValueError("kl_mode must be 'loss' or 'reward'")
        if self.turn_credit not in ("outcome", "discounted"):
            raise ValueError("turn_credit must be 'outcome' or 'discounted'")
        if self.group_size < 1:
            raise ValueError("group_size must be ≥ 1")
        if self.rft_collect_rounds < 1 or self.rft_batch_size < 1:
            raise ValueError("rft_collect_rounds and rft_batch_size must be ≥ 1")


@dataclass
class RewardConfig:
    """The reward of a run: a ``gpu_workers.reward`` config (its name or a dict), sent with every
    evaluation so that the evaluator's own ``reward`` is the training reward, plus training-only
    shaping: what a reply without a usable candidate and an evaluation that timed out or crashed
    score (None: the config's floor)."""

    config: str | dict[str, Any] = "cuda_agent_levels"
    no_candidate_reward: float | None = None
    failure_reward: float | None = None

    def __post_init__(self) -> None:
        resolve_reward_config(self.config)  # an unknown name or kind fails at load time

    def resolved(self) -> dict[str, Any]:
        return resolve_reward_config(self.config)

    @property
    def name(self) -> str:
        return str(self.resolved().get("name", ""))

    @property
    def floor(self) -> float:
        return float(self.resolved().get("floor", 0.0))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardConfig:
        _reject_unknown(cls, data, "reward")
        return cls(**data)


@dataclass
class OptimConfig:
    lr: float = 1e-5
    critic_lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    grad_clip: float = 1.0
    # Memory knobs of the update (training/trainer.py): padded tokens per forward/backward (gradients
    # accumulate over micro-batches; 0: the whole optimiser batch at once), and positions per LM-head chunk.
    micro_batch_tokens: int = 0
    logprob_chunk_tokens: int = 1024


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    max_turns: int = 1
    max_context: int = 512
    max_rollout_tokens: int | None = None  # prompt + reply tokens over one rollout (its own budget)

    def __post_init__(self) -> None:
        if not self.temperature > 0:
            raise ValueError("sampling.temperature must be > 0: the policy's log-probs are taken at that "
                             "temperature, and greedy decoding has none")


@dataclass
class EvaluatorConfig:
    kind: str = "gpu_workers"  # or "synthetic"
    device: str = "cpu"
    track: str = "open"
    workers: int = 2
    processes: int = 1  # the local pool's worker processes, the workers shared between them (LocalPool)
    timeout_s: float = 600.0
    use_ray: bool = False  # Ray evaluator actors, one per GPU; joins RAY_ADDRESS
    request: dict[str, Any] = field(default_factory=dict)  # extra EvalRequest fields (trials, baselines…)
    synthetic_target: str = "a"  # synthetic reward: share of this character in the response
    # The agent's acceptance bar inside a rollout (None: the first passing submission ends it).
    target_speedup: float | None = None
    target_baseline: str = "compile"

    def __post_init__(self) -> None:
        if self.kind not in ("gpu_workers", "synthetic"):
            raise ValueError("evaluator.kind must be 'gpu_workers' or 'synthetic'")
        if not 1 <= self.processes <= max(self.workers, 1):
            raise ValueError(f"evaluator.processes must be between 1 and evaluator.workers ({self.workers}), "
                             f"not {self.processes}")


@dataclass
class GenerationConfig:
    """Who samples the rollouts: ``policy`` (Hugging Face ``generate`` on the trained model) or
    ``openai`` (a vLLM/SGLang server at ``base_url`` serving the policy; after every update the
    policy is saved under ``weights_dir`` and ``POST {server}{reload_path}`` gets
    ``{reload_key: that directory}``)."""

    kind: str = "policy"
    batch_size: int = 64  # policy: prompts per generate call
    base_url: str = ""
    model: str = ""  # the served model's name
    weights_dir: str = ""
    reload_path: str = "/update_weights_from_disk"
    reload_key: str = "model_path"
    timeout_s: float = 600.0
    concurrency: int = 64

    def __post_init__(self) -> None:
        if self.kind not in ("policy", "openai"):
            raise ValueError("generation.kind must be 'policy' or 'openai'")
        if self.kind == "openai" and not (self.base_url and self.weights_dir):
            raise ValueError("generation.kind 'openai' needs base_url and weights_dir (where the server reads "
                             "the updated policy)")


@dataclass
class DataConfig:
    # {"kind": "suite", "names": [...]?} | {"kind": "jsonl", "path": ...} (Ops-6K rows)
    # | {"kind": "variants_jsonl", "path": ...} (correct variants per task) | {"kind": "synthetic", "n": 4}
    sources: list[dict[str, Any]] = field(default_factory=lambda: [{"kind": "suite"}])
    # evaluation tasks the training tasks must not resemble (same source kinds)
    eval_sources: list[dict[str, Any]] = field(default_factory=list)
    contamination_threshold: float = 0.6
    contamination_method: str = "jaccard"
    tasks_per_step: int = 2


@dataclass
class StageConfig:
    name: str
    kind: str
    steps: int
    algo: dict[str, Any] = field(default_factory=dict)
    sampling: dict[str, Any] = field(default_factory=dict)
    optim: dict[str, Any] = field(default_factory=dict)
    reward: dict[str, Any] | None = None  # a RewardConfig dict replacing the run's

    def __post_init__(self) -> None:
        if self.kind not in STAGE_KINDS:
            raise ValueError(f"stage kind must be one of {STAGE_KINDS}, got {self.kind!r}")
        if self.steps < 0:
            raise ValueError("stage steps must be ≥ 0")
        # Fail at load time, not hours into a run, on a misspelt override.
        for name, cls in (("algo", AlgoConfig), ("sampling", SamplingConfig), ("optim", OptimConfig)):
            unknown = sorted(set(getattr(self, name)) - {f.name for f in dataclasses.fields(cls)})
            if unknown:
                raise ValueError(f"stage {self.name!r}: unknown {name} overrides {unknown}")


@dataclass
class RunConfig:
    name: str
    stages: list[StageConfig]
    version: int = RUN_CONFIG_VERSION
    seed: int = 0
    device: str = "cpu"  # where the policy trains
    model: ModelSpec = field(default_factory=ModelSpec)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    data: DataConfig = field(default_factory=DataConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint_every: int = 10  # steps; the last step of every stage is checkpointed too
    keep_checkpoints: int = 2
    trajectories_per_step: int = 2  # sampled trajectories emitted per step
    # Ray rollout actors holding policy copies (weights synced every step); 0: sample in the trainer.
    rollout_workers: int = 0
    rollout_worker_gpus: float = 0.0

    def __post_init__(self) -> None:
        if self.version != RUN_CONFIG_VERSION:
            raise ValueError(f"RunConfig version {self.version} is not {RUN_CONFIG_VERSION}")
        if not self.stages:
            raise ValueError("a run needs at least one stage")

    # -- effective settings of a stage ------------------------------------------------------------
    def stage_algo(self, stage: StageConfig) -> AlgoConfig:
        return dataclasses.replace(self.algo, **stage.algo)

    def stage_sampling(self, stage: StageConfig) -> SamplingConfig:
        return dataclasses.replace(self.sampling, **stage.sampling)

    def stage_optim(self, stage: StageConfig) -> OptimConfig:
        return dataclasses.replace(self.optim, **stage.optim)

    def stage_reward(self, stage: StageConfig) -> RewardConfig:
        return RewardConfig.from_dict(stage.reward) if stage.reward is not None else self.reward

    @property
    def total_steps(self) -> int:
        return sum(s.steps for s in self.stages)

    # -- data ---------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["optim"]["betas"] = list(self.optim.betas)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def config_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()[:16]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        nested = {"model": ModelSpec, "sampling": SamplingConfig, "evaluator": EvaluatorConfig,
                  "generation": GenerationConfig,
                  "data": DataConfig, "algo": AlgoConfig, "optim": OptimConfig}
        _reject_unknown(cls, data, "RunConfig")
        kwargs = dict(data)
        for key, sub in nested.items():
            if key in kwargs:
                _reject_unknown(sub, kwargs[key], key)
                kwargs[key] = sub(**kwargs[key])
        if "optim" in kwargs:
            kwargs["optim"].betas = tuple(kwargs["optim"].betas)
        if "reward" in kwargs:
            kwargs["reward"] = RewardConfig.from_dict(kwargs["reward"])
        kwargs["stages"] = [StageConfig(**_checked(StageConfig, s, "stage")) for s in data.get("stages", [])]
        return cls(**kwargs)

    @classmethod
    def load(cls, path: str | Path) -> RunConfig:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


def _reject_unknown(cls: type, data: dict[str, Any], where: str) -> None:
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"unknown {where} fields: {unknown}")


def _checked(cls: type, data: dict[str, Any], where: str) -> dict[str, Any]:
    _reject_unknown(cls, data, where)
    return data


# -------------------------------------------------------------------------------------------------
# Built-in recipes (the JSON files in training/configs/ are these, written out)


def tiny_cpu_grpo() -> RunConfig:
    """Minutes on a laptop CPU: a 2-layer byte-level Llama learns a synthetic reward with GRPO."""
    return RunConfig(
        name="tiny_cpu_grpo", seed=0, device="cpu",
        model=ModelSpec(kind="tiny_llama", hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                        max_positions=128),
        reward=RewardConfig("correctness"),
        sampling=SamplingConfig(temperature=1.0, max_new_tokens=16, max_turns=1, max_context=128),
        evaluator=EvaluatorConfig(kind="synthetic", synthetic_target="a"),
        data=DataConfig(sources=[{"kind": "synthetic", "n": 4}], tasks_per_step=2),
        algo=AlgoConfig(group_size=8, kl_coef=0.0, scale_rewards_by_std=False,
                        loss_aggregation="seq_mean_token_sum_norm", ppo_epochs=1),
        optim=OptimConfig(lr=1e-2, grad_clip=1.0),
        stages=[StageConfig(name="grpo", kind="grpo", steps=20)],
        checkpoint_every=10, trajectories_per_step=2,
    )


def tiny_cpu_ppo() -> RunConfig:
    """The PPO path on the CPU: critic warm-up then PPO with GAE on the synthetic reward."""
    cfg = tiny_cpu_grpo()
    cfg.name = "tiny_cpu_ppo"
    cfg.algo = dataclasses.replace(cfg.algo, kl_coef=0.01, kl_mode="reward", kl_estimator="k1")
    cfg.optim = OptimConfig(lr=1e-2, critic_lr=1e-2)
    cfg.stages = [StageConfig(name="critic_warmup", kind="critic_warmup", steps=3),
                  StageConfig(name="ppo", kind="ppo", steps=20)]
    return cfg


def tiny_cpu_open_track() -> RunConfig:
    """The wiring to the real CPU evaluator (open track) on our suite, with a tiny policy in the
    agent's environment: SFT on the suite's reference kernels, then GRPO under CUDA Agent's discrete
    reward. A random tiny model will not write kernels in minutes; this recipe exercises the path."""
    return RunConfig(
        name="tiny_cpu_open_track", seed=0, device="cpu",
        model=ModelSpec(kind="tiny_llama", max_positions=8192),
        reward=RewardConfig("cuda_agent_levels"),
        sampling=SamplingConfig(max_new_tokens=256, max_turns=2, max_context=8192),
        evaluator=EvaluatorConfig(kind="gpu_workers", device="cpu", track="open", workers=2, timeout_s=300,
                                  request={"trials": 2, "baselines": ["eager"], "timing_budget_s": 0.5}),
        data=DataConfig(sources=[{"kind": "suite"}], tasks_per_step=2),
        algo=AlgoConfig(group_size=2, turn_credit="discounted", turn_gamma=0.4),
        optim=OptimConfig(lr=1e-3),
        stages=[StageConfig(name="sft", kind="sft", steps=2), StageConfig(name="grpo", kind="grpo", steps=2)],
        checkpoint_every=1,
    )


_BIG_MODEL = ModelSpec(kind="pretrained", name_or_path="Qwen/Qwen2.5-Coder-7B-Instruct", dtype="bfloat16",
                       max_positions=32768, gradient_checkpointing=True)
_CUDA_EVAL = EvaluatorConfig(kind="gpu_workers", device="cuda", track="strict", workers=8, timeout_s=900,
                             use_ray=True, request={"baselines": ["eager", "compile"]},
                             target_speedup=1.05, target_baseline="compile")


def cuda_agent() -> RunConfig:
    """CUDA Agent: single-turn PPO warm-up → RFT (offline epochs over the good multi-turn
    trajectories) → critic pre-training from the post-RFT actor with λ = 1 → multi-turn agentic PPO
    (clip 0.2/0.28, GAE γ=1 λ=0.95), discrete −1/1/2/3 reward, agents aiming at 1.05× torch.compile."""
    return RunConfig(
        name="cuda_agent", seed=0, device="cuda", model=_BIG_MODEL,
        reward=RewardConfig("cuda_agent_levels"),
        sampling=SamplingConfig(temperature=1.0, max_new_tokens=8192, max_turns=1, max_context=32768),
        evaluator=_CUDA_EVAL,
        data=DataConfig(sources=[{"kind": "jsonl", "path": "data/ops6k.jsonl"}],
                        eval_sources=[{"kind": "suite"}], tasks_per_step=16),
        algo=AlgoConfig(group_size=4, clip_low=0.2, clip_high=0.28, gamma=1.0, lam=0.95, kl_coef=0.0,
                        ppo_epochs=1, minibatch_size=16),
        optim=OptimConfig(lr=1e-6, critic_lr=5e-6, micro_batch_tokens=32768),
        stages=[
            StageConfig(name="single_turn_ppo", kind="ppo", steps=50),
            StageConfig(name="rft", kind="rft", steps=20, sampling={"max_turns": 8},
                        algo={"rft_min_reward": 2.0, "rft_collect_rounds": 4, "rft_batch_size": 16}),
            StageConfig(name="critic_pretrain", kind="critic_warmup", steps=20, sampling={"max_turns": 8},
                        algo={"lam": 1.0}),
            StageConfig(name="agentic_ppo", kind="ppo", steps=150, sampling={"max_turns": 8}),
        ],
        checkpoint_every=10,
    )


def cuda_l1() -> RunConfig:
    """CUDA-L1: SFT on correct variants per task (a JSONL) → self-supervised (0/1 correctness
    reward, keep the correct ones) → contrastive RL with GRPO (earlier variants and their speedups in
    the prompt, sampled across speed buckets from one exemplar store filled since stage 1)."""
    return RunConfig(
        name="cuda_l1", seed=0, device="cuda", model=_BIG_MODEL,
        reward=RewardConfig({"kind": "clipped", "clip_max": 10.0}),
        sampling=SamplingConfig(max_new_tokens=8192, max_context=32768),
        evaluator=_CUDA_EVAL,
        data=DataConfig(sources=[{"kind": "variants_jsonl", "path": "data/cuda_l1_variants.jsonl"}],
                        eval_sources=[{"kind": "suite"}], tasks_per_step=16),
        algo=AlgoConfig(group_size=8, kl_coef=0.0),
        optim=OptimConfig(lr=1e-6, micro_batch_tokens=32768),
        stages=[
            StageConfig(name="sft", kind="sft", steps=100, optim={"lr": 1e-5}),
            StageConfig(name="self_supervised", kind="rft", steps=50, reward={"config": "correctness"},
                        algo={"rft_min_reward": 1.0, "rft_collect_rounds": 4, "rft_batch_size": 16}),
            StageConfig(name="contrastive_rl", kind="grpo", steps=200, algo={"contrastive_variants": 4}),
        ],
        checkpoint_every=10,
    )


def kevin() -> RunConfig:
    """Kevin-32B: multi-turn GRPO over refinement turns, reward 0.3·correct + speedup, per-turn
    returns discounted with γ = 0.4 and normalised across the group's turns."""
    return RunConfig(
        name="kevin", seed=0, device="cuda", model=_BIG_MODEL,
        reward=RewardConfig("kevin"),
        sampling=SamplingConfig(max_new_tokens=4096, max_turns=4, max_context=32768),
        evaluator=_CUDA_EVAL,
        data=DataConfig(sources=[{"kind": "jsonl", "path": "data/ops6k.jsonl"}],
                        eval_sources=[{"kind": "suite"}], tasks_per_step=8),
        algo=AlgoConfig(group_size=16, turn_credit="discounted", turn_gamma=0.4, kl_coef=0.0,
                        scale_rewards_by_std=True),
        optim=OptimConfig(lr=2e-6, micro_batch_tokens=32768),
        stages=[StageConfig(name="multi_turn_grpo", kind="grpo", steps=100)],
        checkpoint_every=10,
    )


BUILTIN_RECIPES = {f.__name__: f for f in (tiny_cpu_grpo, tiny_cpu_ppo, tiny_cpu_open_track, cuda_agent, cuda_l1, kevin)}


def write_builtin_configs(directory: Path = CONFIGS_DIR) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, make in BUILTIN_RECIPES.items():
        (directory / f"{name}.json").write_text(make().to_json() + "\n", encoding="utf-8")
