"""The other stage kinds on the CPU: SFT on correct kernels, RFT as offline epochs, critic warm-up
from the post-RFT actor, and the exemplar store across stages."""

import dataclasses
import json

import pytest
import torch

from training.data import TrainingTask
from training.metrics import ListSink
from training.policy import causal_lm_parts
from training.recipes import (
    BUILTIN_RECIPES,
    AlgoConfig,
    DataConfig,
    OptimConfig,
    SamplingConfig,
    StageConfig,
    tiny_cpu_grpo,
)
from training.rollout import Rollout, Turn, TurnOutcome
from training.runner import _Run, run_training

KERNEL = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_sft_rft_critic_warmup_grpo_pipeline(tmp_path):
    cfg = tiny_cpu_grpo()
    cfg.model = dataclasses.replace(cfg.model, max_positions=4096)
    cfg.sampling = SamplingConfig(max_new_tokens=8, max_context=4096)
    cfg.data = DataConfig(sources=[{"kind": "suite", "names": ["silu", "gelu"]}], tasks_per_step=2)
    cfg.algo = AlgoConfig(group_size=2, rft_batch_size=3)
    cfg.optim = OptimConfig(lr=1e-3, critic_lr=1e-3)
    cfg.stages = [StageConfig(name="sft", kind="sft", steps=2),
                  StageConfig(name="rft", kind="rft", steps=2, algo={"rft_min_reward": 0.0}),
                  StageConfig(name="critic", kind="critic_warmup", steps=1),
                  StageConfig(name="grpo", kind="grpo", steps=1)]
    cfg.checkpoint_every = 100
    sink = ListSink()
    run_training(cfg, out_dir=tmp_path, sink=sink)
    sft1, sft2, rft1, rft2, critic, grpo = sink.metrics
    assert sft2.sft_loss < sft1.sft_loss  # same two reference kernels, one step later
    # RFT sampled once (2 tasks x 2) at its start, then trained on that data for two steps
    assert (rft1.num_rollouts, rft2.num_rollouts) == (4, 0)
    assert rft1.kept_for_sft == rft2.kept_for_sft == 4 and rft2.sft_loss is not None
    assert len(json.loads((tmp_path / "rft" / "stage_1.json").read_text())) == 4
    assert critic.value_loss is not None and critic.policy_loss is None  # only the critic moved
    assert grpo.policy_loss is not None
    assert [c.step for c in sink.checkpoints] == [2, 4, 5, 6]  # end of every stage


def test_rft_batches_walk_seeded_epochs_without_repeats(tmp_path):
    run = _Run(tiny_cpu_grpo(), tmp_path, ListSink(), None, None)
    dataset = [([i], [1], [(0, 1)]) for i in range(5)]
    seen = []
    for stage_step in range(5):  # 5 steps of 2 over 5 trajectories: two whole epochs
        run.state.stage_step = stage_step
        batch = run.rft_batch(dataset, 2)
        assert len({b[0][0] for b in batch}) == len(batch) == 2
        seen += [b[0][0] for b in batch]
    assert sorted(seen[:5]) == sorted(seen[5:]) == [0, 1, 2, 3, 4]
    run.state.stage_step = 0
    assert run.rft_batch(dataset, 8) == [dataset[i] for i in _order(run, 5)]


def _order(run, n):
    import random

    order = list(range(n))
    random.Random(run.config.seed * 31 + run.state.stage_index * 1009).shuffle(order)
    return order


def test_critic_warmup_starts_from_the_actor_after_the_stages_before_it(tmp_path):
    # given: PPO (a critic from the base model), then SFT moves the actor, then a critic warm-up
    cfg = tiny_cpu_grpo()
    cfg.model = dataclasses.replace(cfg.model, max_positions=4096)
    cfg.sampling = SamplingConfig(max_new_tokens=4, max_context=4096)
    cfg.data = DataConfig(sources=[{"kind": "suite", "names": ["silu"]}], tasks_per_step=1)
    cfg.algo = AlgoConfig(group_size=2)
    cfg.optim = OptimConfig(lr=1e-2, critic_lr=1e-2)
    cfg.stages = [StageConfig(name="ppo", kind="ppo", steps=0), StageConfig(name="sft", kind="sft", steps=1),
                  StageConfig(name="critic", kind="critic_warmup", steps=1, algo={"lam": 1.0})]
    run = _Run(cfg, tmp_path, ListSink(), None, None)
    run.enter_stage(0, cfg.stages[0], resumed_mid_stage=False)
    base_critic = run.trainer.critic
    run.enter_stage(1, cfg.stages[1], resumed_mid_stage=False)
    run.run_step(cfg.stages[1])

    # when: the warm-up stage begins
    run.enter_stage(2, cfg.stages[2], resumed_mid_stage=False)

    # then: its critic is a fresh copy of the post-SFT actor, not the critic copied from the base model
    critic = run.trainer.critic
    assert critic is not base_critic
    actor = dict(causal_lm_parts(run.policy)[0].named_parameters())  # the critic keeps the decoder only
    names = [n for n, _ in critic.decoder.named_parameters()]
    assert names and sorted(names) == sorted(actor)
    for name, p in critic.decoder.named_parameters():
        assert torch.equal(p, actor[name])
    assert any(not torch.equal(p, actor[n]) for n, p in base_critic.decoder.named_parameters())
    assert cfg.stage_algo(cfg.stages[2]).lam == 1.0


def test_cuda_agent_recipe_warms_the_critic_with_lambda_one():
    agent = BUILTIN_RECIPES["cuda_agent"]()
    critic_stage = next(s for s in agent.stages if s.kind == "critic_warmup")
    assert agent.stage_algo(critic_stage).lam == 1.0
    assert agent.stage_algo(agent.stages[-1]).lam == 0.95
    assert agent.evaluator.target_speedup == 1.05 and agent.evaluator.target_baseline == "compile"


def test_one_exemplar_store_across_stages_deduplicated_and_fed_to_the_agent(tmp_path):
    # given: a run whose SFT data holds two variants of a task, one of them produced again by a rollout
    cfg = tiny_cpu_grpo()
    cfg.stages = [StageConfig(name="sft", kind="sft", steps=0),
                  StageConfig(name="grpo", kind="grpo", steps=1, algo={"contrastive_variants": 2})]
    run = _Run(cfg, tmp_path, ListSink(), None, None)
    task = TrainingTask(name="synthetic_0", task_source="class Model: pass\n",
                        variants=[{"source": KERNEL, "speedup": 1.5}, {"source": KERNEL + "# b\n", "speedup": 3.0}])
    run.tasks = [task]
    run.enter_stage(0, cfg.stages[0], resumed_mid_stage=False)
    r = Rollout(task_name="synthetic_0", group=0, index=0, prompt_ids=[])
    for source, speedup in ((KERNEL, 1.9), (KERNEL + "# c\n", 0.7)):
        result = {"status": "passed", "correct": True, "speedup": {"eager": speedup}}
        r.turns.append(Turn(action_ids=[], text="", outcome=TurnOutcome(1.0, "passed", result, kernel_source=source)))
    failed = {"status": "incorrect", "correct": False, "speedup": {}}
    r.turns.append(Turn(action_ids=[], text="", outcome=TurnOutcome(-1.0, "incorrect", failed, kernel_source="bad")))

    # when: the rollout is remembered
    run.remember([r])

    # then: one entry per distinct source, the best speedup kept, failures left out; it survives a checkpoint
    variants = run.exemplars().variants("synthetic_0")
    assert sorted((v.speedup, v.source[-4:]) for v in variants) == [
        (0.7, "# c\n"), (1.9, "n x\n"), (3.0, "# b\n")]
    assert run.state.to_dict()["extra"]["exemplars"] == run.exemplars().to_dict()


def test_contrastive_rollouts_get_the_store_and_the_loop_samples_across_buckets(tmp_path):
    from agent.loop import RolloutConfig
    from agent.prompts import Variant, sample_contrastive, speedup_bucket

    # the environment hands the whole store to the agent's loop, which picks k with sample_contrastive
    cfg = BUILTIN_RECIPES["cuda_l1"]()
    stage = cfg.stages[2]
    from training.evaluation import make_environment

    env = make_environment(cfg, stage, tokenizer=None, pool=None)
    store = [Variant(KERNEL + f"# {i}\n", s) for i, s in enumerate((0.5, 0.6, 1.2, 1.3, 2.0, 4.0))]
    config = env.rollout_config(TrainingTask("t", "class Model: pass\n"),
                                _settings(), store, seed=3)
    assert isinstance(config, RolloutConfig) and config.contrastive_k == 4
    assert config.contrastive_variants == store
    import random

    chosen = sample_contrastive(config.contrastive_variants, config.contrastive_k, rng=random.Random(config.seed))
    assert [speedup_bucket(v) for v in chosen] == [1, 2, 3, 4]  # one per speed bucket, not the top 4


def _settings():
    from training.rollout import CollectSettings

    return CollectSettings(group_size=1, max_turns=2, max_new_tokens=64, max_context=512)


def test_variants_jsonl_rows_without_a_kernel_are_refused(tmp_path):
    from training.data import variants_jsonl_tasks

    path = tmp_path / "variants.jsonl"
    path.write_text(json.dumps({"name": "t", "code": "class Model: pass\n", "kernel": KERNEL, "speedup": 1.2})
                    + "\n" + json.dumps({"name": "t", "code": "class Model: pass\n", "kernel": KERNEL + "#\n",
                                         "speedup": 2.5}) + "\n")
    (task,) = variants_jsonl_tasks(path)
    assert [v["speedup"] for v in task.variants] == [1.2, 2.5]
    assert task.reference_kernel == KERNEL + "#\n" and task.sft_kernels() == [KERNEL, KERNEL + "#\n"]
    path.write_text(json.dumps({"name": "u", "code": "class Model: pass\n", "ops": ["relu"]}) + "\n")
    with pytest.raises(ValueError, match=r"variants.jsonl:1: row has no reference kernel \('kernel'\)"):
        variants_jsonl_tasks(path)
