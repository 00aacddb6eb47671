"""The other stage kinds on the CPU: SFT on reference kernels, RFT, critic warm-up, contrastive GRPO."""

import dataclasses

from training.data import TrainingTask
from training.evaluation import TurnOutcome
from training.metrics import ListSink
from training.prompting import PromptSettings, build_prompt
from training.recipes import AlgoConfig, DataConfig, OptimConfig, SamplingConfig, StageConfig, tiny_cpu_grpo
from training.rollout import Rollout, Turn
from training.runner import _Run, run_training


def test_sft_rft_critic_warmup_grpo_pipeline(tmp_path):
    cfg = tiny_cpu_grpo()
    cfg.model = dataclasses.replace(cfg.model, max_positions=256)
    cfg.sampling = SamplingConfig(max_new_tokens=8, max_context=256)
    cfg.data = DataConfig(sources=[{"kind": "suite", "names": ["silu", "gelu"]}], tasks_per_step=2,
                          prompt_style="short")
    cfg.algo = AlgoConfig(group_size=2)
    cfg.optim = OptimConfig(lr=1e-3, critic_lr=1e-3)
    cfg.stages = [StageConfig(name="sft", kind="sft", steps=2),
                  StageConfig(name="rft", kind="rft", steps=1, algo={"rft_min_reward": 0.0}),
                  StageConfig(name="critic", kind="critic_warmup", steps=1),
                  StageConfig(name="grpo", kind="grpo", steps=1)]
    cfg.checkpoint_every = 100
    sink = ListSink()
    run_training(cfg, out_dir=tmp_path, sink=sink)
    sft1, sft2, rft, critic, grpo = sink.metrics
    assert sft2.sft_loss < sft1.sft_loss  # same two reference kernels, one step later
    assert rft.kept_for_sft == 4 and rft.sft_loss is not None
    assert critic.value_loss is not None and critic.policy_loss is None  # only the critic moved
    assert grpo.policy_loss is not None
    assert [c.step for c in sink.checkpoints] == [2, 3, 4, 5]  # end of every stage


def test_contrastive_prompt_carries_earlier_kernels_with_speedups(tmp_path):
    cfg = tiny_cpu_grpo()
    run = _Run(cfg, tmp_path, ListSink(), None, None)
    kernel = "```python\nclass ModelNew:\n    pass\n```"
    r = Rollout(task_name="synthetic_0", group=0, index=0, prompt_ids=[])
    for speedup in (1.5, 3.0):
        outcome = TurnOutcome(1.0, "passed", {"status": "passed", "correct": True, "speedup": {"eager": speedup}})
        r.turns.append(Turn(action_ids=[], text=kernel, outcome=outcome))
    run.remember([r])
    task = TrainingTask(name="synthetic_0", task_source="class Model: pass\n")
    variants = run.variants_for(2)(task)
    assert [v["speedup"] for v in variants] == [1.5, 3.0]  # slowest first
    _, user = build_prompt(task, PromptSettings(style="agent"), variants)
    assert "speedup 1.50x" in user and "speedup 3.00x" in user and user.count("### Variant") == 2
