"""End to end on the CPU: scripted replies → the agent's loop with the real evaluator (open track) as
its tools → a GRPO and a PPO step of a tiny random Llama on those exact token ids."""

import math
import threading

import pytest
import torch

from agent.tools import describe_verify
from gpu_workers import EvalResult
from gpu_workers.reward import compute_reward, resolve_reward_config
from gpu_workers.suite import get_task
from gpu_workers.workers.pool import LocalPool
from training.data import TrainingTask
from training.generation import PolicyBackend
from training.policy import ByteTokenizer, ModelSpec, ScriptedGenerator, build_model
from training.recipes import AlgoConfig, OptimConfig
from training.rollout import AgentEnvironment, CollectSettings, RolloutCollector
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
REQUEST = {"trials": 2, "baselines": ["eager"], "timing_budget_s": 0.2}
LEVELS = resolve_reward_config("cuda_agent_levels")
SETTINGS = CollectSettings(group_size=3, max_turns=1, max_new_tokens=512, max_context=8192)


def environment(pool, **overrides):
    return AgentEnvironment(**{"pool": pool, "reward_config": LEVELS, "device": "cpu", "track": "open",
                               "request": REQUEST, "timeout_s": 300, **overrides})


def collector(tok, script, env, settings=SETTINGS):
    return RolloutCollector(PolicyBackend(ScriptedGenerator(tok, script), tok.eos_token_id), tok, env,
                            settings=settings)


@pytest.fixture(scope="module")
def evaluated():
    task = TrainingTask(name="silu", task_source=get_task("silu").task_source)
    tok = ByteTokenizer()
    replies = [GOOD, WRONG, NO_CODE]
    with LocalPool(workers=2) as pool:
        rollouts = collector(tok, lambda prompt, i: replies[i % 3], environment(pool)).collect([task])
    return tok, rollouts


def tiny(tok):
    return build_model(ModelSpec(max_positions=8192), tok, seed=0)


def test_rewards_come_from_the_real_evaluator_under_the_reward_config(evaluated):
    _, rollouts = evaluated
    statuses = [r.turns[0].outcome.status for r in rollouts]
    assert statuses == ["passed", "incorrect", "format_error"]
    good = rollouts[0].turns[0].outcome
    assert good.result["correct"] is True and good.latency_s > 0 and good.tool == "submit"
    assert good.result["reward_config"]["name"] == "cuda_agent_levels"
    assert good.reward == compute_reward(EvalResult.from_dict(good.result), LEVELS) and good.reward >= 1.0
    assert [r.outcome_reward for r in rollouts[1:]] == [-1.0, -1.0]
    assert [r.stop_reason for r in rollouts] == ["success", "max_turns", "max_turns"]


def test_prompt_is_the_agents_and_only_the_reply_is_the_policys(evaluated):
    tok, rollouts = evaluated
    good = rollouts[0]
    text = tok.decode(good.prompt_ids)
    assert "ACTION: compile" in text and "class ModelNew" in text  # the agent's system prompt
    assert get_task("silu").task_source.strip() in text
    assert good.action_mask() == [0] * len(good.prompt_ids) + [1] * len(good.turns[0].action_ids)
    assert tok.decode(good.turns[0].action_ids) == GOOD


def test_multi_turn_agent_rollout_honours_action_lines_and_masks_observations():
    # given: turn 1 asks to verify a wrong kernel, turn 2 submits the right one
    tok = ByteTokenizer()
    task = TrainingTask(name="silu", task_source=get_task("silu").task_source)
    replies = [WRONG + "\nACTION: verify\n", GOOD]
    settings = CollectSettings(group_size=1, max_turns=3, max_new_tokens=512, max_context=8192)
    with LocalPool(workers=1) as pool:
        (rollout,) = collector(tok, lambda p, i: replies[i], environment(pool), settings).collect([task])

    # then: the verify tool ran and answered with the agent's own observation, masked out of the loss
    first, second = rollout.turns
    assert (first.outcome.tool, first.outcome.status, first.outcome.reward) == ("verify", "incorrect", -1.0)
    assert first.observation == describe_verify(EvalResult.from_dict(first.outcome.result), 4096)
    assert first.observation_ids == tok.observation_ids(first.observation)
    assert (second.outcome.tool, second.outcome.status) == ("submit", "passed")
    assert rollout.stop_reason == "success" and second.observation_ids == []
    mask = rollout.action_mask()
    start = len(rollout.prompt_ids) + len(first.action_ids)
    assert mask[start : start + len(first.observation_ids)] == [0] * len(first.observation_ids)
    assert sum(mask) == len(first.action_ids) + len(second.action_ids)
    assert rollout.outcome_reward == second.outcome.reward >= 1.0


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


def test_timed_out_evaluation_gets_the_failure_reward_and_is_recorded():
    # given: an evaluator that never answers until the test lets it go
    release = threading.Event()

    def stuck(request):
        release.wait()
        return EvalResult(status="passed", correct=True)

    tok = ByteTokenizer()
    task = TrainingTask(name="silu", task_source=get_task("silu").task_source)
    settings = CollectSettings(group_size=2, max_turns=1, max_new_tokens=512, max_context=8192)
    pool = LocalPool(workers=2, evaluate_fn=stuck)
    try:
        env = environment(pool, timeout_s=0.2, failure_reward=-2.0)
        rollouts = collector(tok, lambda p, i: GOOD, env, settings).collect([task])
    finally:
        release.set()
        pool.shutdown()
    outcomes = [r.turns[0].outcome for r in rollouts]
    assert [(o.status, o.reward, o.timed_out) for o in outcomes] == [("timeout", -2.0, True)] * 2
    assert outcomes[0].error.endswith("EvaluationTimeout: evaluation did not finish within 0.2 s")
