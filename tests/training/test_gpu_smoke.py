"""On the GPU machine: a tiny policy on CUDA, scripted CUDA-evaluated replies, one GRPO and one PPO step."""

import pytest
import torch

pytestmark = pytest.mark.gpu

GOOD = """```python
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
```
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_grpo_and_ppo_steps_on_cuda_with_the_cuda_evaluator():
    from gpu_workers.reward import resolve_reward_config
    from gpu_workers.suite import get_task
    from gpu_workers.workers.pool import LocalPool
    from training.data import TrainingTask
    from training.generation import PolicyBackend
    from training.policy import ByteTokenizer, ModelSpec, ScriptedGenerator, build_model
    from training.recipes import AlgoConfig, OptimConfig
    from training.rollout import AgentEnvironment, CollectSettings, RolloutCollector
    from training.trainer import Trainer
    from training.value import CriticModel

    tok = ByteTokenizer()
    replies = [GOOD, GOOD.replace("x * torch.sigmoid(x)", "x"), "no code"]
    pool = LocalPool(workers=2, gpus=1)
    env = AgentEnvironment(pool=pool, reward_config=resolve_reward_config("cuda_agent_levels"), device="cuda",
                           track="open", request={"trials": 2}, timeout_s=600)
    collector = RolloutCollector(PolicyBackend(ScriptedGenerator(tok, lambda p, i: replies[i % 3]), tok.eos_token_id),
                                 tok, env, settings=CollectSettings(group_size=3, max_new_tokens=512, max_context=8192))
    rollouts = collector.collect([TrainingTask("silu", get_task("silu").task_source)])
    assert [r.turns[0].outcome.status for r in rollouts] == ["passed", "incorrect", "format_error"]
    model = build_model(ModelSpec(max_positions=8192), tok, seed=0).cuda()
    critic = CriticModel(build_model(ModelSpec(max_positions=8192), tok, seed=1)).cuda()
    trainer = Trainer(model, optim=OptimConfig(lr=1e-3, critic_lr=1e-3), pad_id=tok.pad_token_id, device="cuda",
                      critic=critic)
    assert trainer.grpo_step(rollouts, AlgoConfig(group_size=3))["grad_norm"] > 0
    assert trainer.ppo_step(rollouts, AlgoConfig())["value_loss"] > 0
    pool.shutdown()
