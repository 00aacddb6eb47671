"""End to end on the CPU: scripted replies → the real evaluator (open track) → a GRPO and a PPO step
of a tiny random Llama on those exact token ids."""

import math
import time

import pytest
import torch

from gpu_workers.suite import get_task
from training.data import TrainingTask
from training.evaluation import EvaluatorScorer, ThreadEvaluatorPool, make_local_pool
from training.policy import ByteTokenizer, ModelSpec, Sampling, ScriptedGenerator, build_model
from training.prompting import PromptSettings
from training.recipes import AlgoConfig, OptimConfig
from training.rewards import RewardScheme, compute_reward
from training.rollout import CollectSettings, RolloutCollector
from training.trainer import Trainer, batch_from_rollouts
from training.value import CriticModel

GOOD = """Sigmoid times x is SiLU.
```python
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
```
"""
WRONG = GOOD.replace("x * torch.sigmoid(x)", "torch.sigmoid(x)")
NO_CODE = "I am not sure how to do this."
REQUEST = {"device": "cpu", "track": "open", "trials": 2, "baselines": ("eager",), "timing_budget_s": 0.2}


@pytest.fixture(scope="module")
def evaluated():
    suite = get_task("silu")
    task = TrainingTask(name="silu", task_source=suite.task_source)
    tok = ByteTokenizer()
    replies = [GOOD, WRONG, NO_CODE]
    generator = ScriptedGenerator(tok, lambda prompt, i: replies[i % 3])
    pool = make_local_pool(2)
    collector = RolloutCollector(
        generator, tok, EvaluatorScorer(pool, RewardScheme("cuda_agent"), REQUEST),
        sampling=Sampling(max_new_tokens=512), prompts=PromptSettings(style="short"),
        settings=CollectSettings(group_size=3, max_turns=1, eval_timeout_s=300, max_context=1024))
    rollouts = collector.collect([task])
    pool.shutdown()
    return tok, rollouts


def tiny(tok):
    return build_model(ModelSpec(max_positions=1024), tok, seed=0)


def test_rewards_come_from_the_real_evaluator(evaluated):
    _, rollouts = evaluated
    statuses = [r.turns[0].outcome.status for r in rollouts]
    assert statuses == ["passed", "incorrect", "format_error"]
    good = rollouts[0].turns[0].outcome
    assert good.result["correct"] is True and good.latency_s > 0
    assert good.reward == compute_reward(good.result, RewardScheme("cuda_agent")) and good.reward >= 1.0
    assert [r.outcome_reward for r in rollouts[1:]] == [-1.0, -1.0]


def test_grpo_step_on_evaluated_rollouts(evaluated):
    tok, rollouts = evaluated
    model = tiny(tok)
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model, optim=OptimConfig(lr=1e-3), pad_id=tok.pad_token_id)
    stats = trainer.grpo_step(rollouts, AlgoConfig(group_size=3))
    # On-policy (one epoch): ratio = 1, so the loss is −mean of per-sequence advantages = 0 for a group.
    assert abs(stats["policy_loss"]) < 1e-6
    assert stats["clip_fraction"] == 0.0 and stats["grad_norm"] > 0
    assert math.isfinite(stats["entropy"])
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_ppo_step_with_critic_on_evaluated_rollouts(evaluated):
    tok, rollouts = evaluated
    model = tiny(tok)
    critic = CriticModel(tiny(tok))
    trainer = Trainer(model, optim=OptimConfig(lr=1e-3, critic_lr=1e-3), pad_id=tok.pad_token_id, critic=critic)
    head_before = critic.value_head.proj.weight.detach().clone()
    stats = trainer.ppo_step(rollouts, AlgoConfig(gamma=1.0, lam=0.95, value_clip=0.2,
                                                loss_aggregation="token_mean"))
    # A fresh critic predicts 0, so with γ=1 the return of the k-th action token before the end is
    # 0.95^k · R: value loss = ½ · mean over action tokens of (0.95^k R)².
    batch = batch_from_rollouts(rollouts, tok.pad_token_id)
    lengths = batch.action_mask.sum(dim=1).tolist()
    total = sum((0.95**k * r.outcome_reward) ** 2 for r, n in zip(rollouts, lengths) for k in range(int(n)))
    assert stats["value_loss"] == pytest.approx(0.5 * total / sum(lengths), rel=1e-4)
    assert abs(stats["policy_loss"]) < 1e-5  # ratio 1 and whitened advantages average 0 over tokens
    assert not torch.equal(head_before, critic.value_head.proj.weight)


def test_timed_out_evaluation_gets_the_floor_and_is_recorded():
    def slow(request):
        time.sleep(2.0)
        raise AssertionError("never awaited")

    tok = ByteTokenizer()
    pool = ThreadEvaluatorPool(1, evaluate_fn=slow)
    task = TrainingTask(name="silu", task_source=get_task("silu").task_source)
    collector = RolloutCollector(
        ScriptedGenerator(tok, lambda p, i: GOOD), tok, EvaluatorScorer(pool, RewardScheme("cuda_agent"), REQUEST),
        sampling=Sampling(max_new_tokens=512), prompts=PromptSettings(style="short"),
        settings=CollectSettings(group_size=2, eval_timeout_s=0.2, max_context=1024))
    started = time.monotonic()
    rollouts = collector.collect([task])
    assert time.monotonic() - started < 1.5
    outcomes = [r.turns[0].outcome for r in rollouts]
    assert [(o.status, o.reward, o.timed_out) for o in outcomes] == [("timeout", -1.0, True)] * 2
    pool.shutdown()
