"""Whole runs of a pretrained directory (the conftest's tokenizer with a chat template + a random Qwen2
saved with save_pretrained): one GRPO step through the agent's loop with the CPU evaluator on a suite
task, and a LoRA PPO run whose critic shares the policy's base, checkpointed, resumed and exported."""

import dataclasses
import json

import pytest
import torch

from gpu_workers.suite import get_task
from training.checkpoint import latest_checkpoint
from training.export import export_checkpoint
from training.metrics import ListSink
from training.policy import ModelSpec, ScriptedGenerator, build_tokenizer
from training.recipes import (
    AlgoConfig,
    DataConfig,
    EvaluatorConfig,
    OptimConfig,
    RewardConfig,
    SamplingConfig,
    StageConfig,
    tiny_cpu_grpo,
)
from training.runner import run_training

GOOD = """SiLU is x times its sigmoid.
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


def _pretrained(directory, **kw):
    return ModelSpec(kind="pretrained", name_or_path=str(directory), max_positions=8192, **kw)


def _state(path, name):
    return torch.load(path / f"{name}.pt", map_location="cpu", weights_only=False)


def test_one_grpo_step_of_a_pretrained_model_in_the_agents_environment(hf_model_dir, tmp_path):
    # given: the directory's Qwen2 as the policy, the agent's loop with the CPU evaluator on the suite's silu,
    # and replies that the policy's tokenizer encodes (one correct kernel, one wrong) in a group of two
    cfg = tiny_cpu_grpo()
    cfg.model = _pretrained(hf_model_dir)
    cfg.reward = RewardConfig("cuda_agent_levels")
    cfg.sampling = SamplingConfig(max_new_tokens=512, max_turns=1, max_context=8192)
    cfg.evaluator = EvaluatorConfig(kind="gpu_workers", device="cpu", track="open", workers=2, timeout_s=300,
                                    request={"trials": 2, "baselines": ["eager"], "timing_budget_s": 0.2})
    cfg.data = DataConfig(sources=[{"kind": "suite", "names": ["silu"]}], tasks_per_step=1)
    cfg.algo = AlgoConfig(group_size=2)
    cfg.optim = OptimConfig(lr=1e-3, micro_batch_tokens=4096, logprob_chunk_tokens=64)
    cfg.stages = [StageConfig(name="grpo", kind="grpo", steps=1)]
    tok = build_tokenizer(cfg.model)
    prompts = []
    generator = ScriptedGenerator(tok, lambda prompt, i: prompts.append(prompt) or (GOOD, WRONG)[i % 2])
    sink = ListSink()

    # when: the run takes its step
    result = run_training(cfg, out_dir=tmp_path / "run", sink=sink, generator=generator)

    # then: the agent's prompt was rendered by the chat template, the evaluator scored both kernels,
    # and the step moved the policy's weights away from the directory's
    (step,) = sink.metrics
    assert result.status == "completed" and step.num_rollouts == 2
    assert step.pass_rate == 0.5 and step.reward_max >= 1.0 and step.reward_min == -1.0
    assert step.policy_loss is not None and step.grad_norm > 0
    assert [t.turns[0]["status"] for t in sink.trajectories[1]] == ["passed", "incorrect"]
    assert len(prompts) == 2 and prompts[0] == prompts[1]
    rendered = tok.tok.decode(prompts[0])
    assert rendered.startswith("<|im_start|>system\n") and rendered.endswith("<|im_start|>assistant\n")
    assert get_task("silu").task_source.strip() in rendered
    ckpt = latest_checkpoint(tmp_path / "run")
    trained = _state(ckpt, "policy")
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(hf_model_dir).state_dict()
    assert sorted(trained) == sorted(base)
    assert any(not torch.equal(trained[k], base[k]) for k in base)


@pytest.fixture(scope="module")
def lora_ppo(hf_model_dir, tmp_path_factory):
    """A LoRA policy (gradient checkpointing on): a critic warm-up then two PPO steps on the synthetic
    reward, every step checkpointed."""
    cfg = tiny_cpu_grpo()
    cfg.name = "lora_ppo"
    cfg.model = _pretrained(hf_model_dir, lora_rank=4, lora_alpha=8, gradient_checkpointing=True)
    cfg.sampling = SamplingConfig(max_new_tokens=6, max_turns=1, max_context=256)
    cfg.algo = AlgoConfig(group_size=4, kl_coef=0.01, kl_mode="reward", kl_estimator="k1")
    cfg.optim = OptimConfig(lr=1e-2, critic_lr=1e-2, micro_batch_tokens=64)
    cfg.data = dataclasses.replace(cfg.data, tasks_per_step=1)
    cfg.stages = [StageConfig(name="critic", kind="critic_warmup", steps=1, algo={"lam": 1.0}),
                  StageConfig(name="ppo", kind="ppo", steps=2)]
    cfg.checkpoint_every = 1
    cfg.keep_checkpoints = 5
    whole = tmp_path_factory.mktemp("whole")
    run_training(cfg, out_dir=whole, sink=ListSink(), generator=_letters(cfg))
    return cfg, whole


def _letters(cfg):
    """Replies drawn with the torch RNG (restored by a resume, like the policy's own sampling), so the
    synthetic reward (the share of "a" tokens) varies from the first step on."""
    replies = ["a", "a b", "a a", "a bb", "a b b"]  # every one scores above 0
    return ScriptedGenerator(build_tokenizer(cfg.model), lambda prompt, i: replies[int(torch.randint(5, ()))])


def test_a_lora_policys_critic_shares_its_base_and_checkpoints_apart(lora_ppo):
    cfg, whole = lora_ppo
    ckpt = latest_checkpoint(whole)
    policy, critic = _state(ckpt, "policy"), _state(ckpt, "critic")
    # the policy's file has the model's keys only; the critic's is its adapter and value head, no base weights
    assert policy and not any(".critic." in k for k in policy)
    assert any(".default." in k for k in policy)
    assert critic and all(k.startswith(("adapter_weights.", "value_head.")) for k in critic)
    lora_tensors = [k for k in policy if ".default." in k]
    assert len(critic) == len(lora_tensors) + 2  # one tensor per policy adapter tensor, plus weight and bias
    # the critic started as the policy's adapter (after one warm-up step only the zero-initialised value
    # head has had a gradient), and PPO then trained the two adapters apart
    warm = whole / "checkpoints" / "step_000001"
    warm_policy, warm_critic = _state(warm, "policy"), _state(warm, "critic")
    for i, key in enumerate(lora_tensors):
        assert torch.equal(warm_critic[f"adapter_weights.{i}"], warm_policy[key]), key
    assert any("lora_A" in k and warm_policy[k].abs().sum() > 0 for k in lora_tensors)  # random, not a fresh zero
    assert warm_critic["value_head.proj.weight"].abs().sum() > 0
    assert any(not torch.equal(critic[f"adapter_weights.{i}"], policy[k]) for i, k in enumerate(lora_tensors))
    metrics = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    assert [m["stage_kind"] for m in metrics] == ["critic_warmup", "ppo", "ppo"]
    assert metrics[0]["policy_loss"] is None and all(m["value_loss"] > 0 for m in metrics)


def test_a_cancelled_lora_ppo_run_resumes_to_the_same_weights_and_exports(lora_ppo, tmp_path):
    cfg, whole = lora_ppo
    # given: the same run cancelled after its second step
    sink = ListSink()
    first = run_training(cfg, out_dir=tmp_path / "run", sink=sink, cancel=lambda: len(sink.metrics) >= 2,
                         generator=_letters(cfg))
    assert first.status == "cancelled" and first.step == 2
    # when: it resumes
    second = run_training(cfg, out_dir=tmp_path / "run", sink=ListSink(), resume=True, generator=_letters(cfg))
    # then: it ends where the uninterrupted run ended, the policy and the shared critic alike
    assert second.status == "completed" and second.step == 3
    done, reference = latest_checkpoint(tmp_path / "run"), latest_checkpoint(whole)
    for name in ("policy", "critic"):
        got, want = _state(done, name), _state(reference, name)
        assert sorted(got) == sorted(want)
        for key in want:
            assert torch.equal(got[key], want[key]), (name, key)
    # and the checkpoint exports as a Hugging Face directory with the adapters merged
    from transformers import AutoModelForCausalLM

    out = export_checkpoint(tmp_path / "run", 3, tmp_path / "export")
    exported = AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert not any("lora_" in k for k in exported)
    base = AutoModelForCausalLM.from_pretrained(cfg.model.name_or_path).state_dict()
    assert sorted(exported) == sorted(base)
    assert any(not torch.equal(exported[k], base[k]) for k in base)


def test_a_fresh_critic_warm_up_replaces_the_shared_adapter_with_a_copy_of_the_actor(hf_model_dir, tmp_path):
    # given: a LoRA run whose first critic came with a PPO stage, then a GRPO step moved the actor's adapter
    from training.runner import _Run

    cfg = tiny_cpu_grpo()
    cfg.model = _pretrained(hf_model_dir, lora_rank=4, lora_alpha=8)
    cfg.sampling = SamplingConfig(max_new_tokens=6, max_turns=1, max_context=256)
    cfg.algo = AlgoConfig(group_size=4)
    cfg.optim = OptimConfig(lr=1e-2, critic_lr=1e-2)
    cfg.stages = [StageConfig(name="ppo", kind="ppo", steps=0), StageConfig(name="grpo", kind="grpo", steps=2),
                  StageConfig(name="critic", kind="critic_warmup", steps=1)]
    run = _Run(cfg, tmp_path, ListSink(), _letters(cfg), None)
    run.enter_stage(0, cfg.stages[0], resumed_mid_stage=False)
    first = run.trainer.critic
    run.enter_stage(1, cfg.stages[1], resumed_mid_stage=False)
    for _ in range(2):  # lora_B starts at 0: the second step moves lora_A too
        run.run_step(cfg.stages[1])

    # when: the warm-up stage begins
    run.enter_stage(2, cfg.stages[2], resumed_mid_stage=False)

    # then: one critic adapter on the policy, a fresh one equal to the actor's adapter as it stands now
    critic = run.trainer.critic
    assert critic is not first and critic.shared and not first.shared
    assert sorted(run.policy.peft_config) == ["critic", "default"]
    params = dict(run.policy.named_parameters())
    pairs = [(n, n.replace(".critic.", ".default.")) for n in params if ".critic." in n]
    assert pairs and all(torch.equal(params[c], params[d]) for c, d in pairs)
    assert len(critic.adapter_weights) == len(pairs)
    assert all(a is params[c] for a, (c, _) in zip(critic.adapter_weights, pairs))  # on the policy's modules
    assert any("lora_B" in d and params[d].abs().sum() > 0 for _, d in pairs)  # the actor did move
    optimised = run.trainer.critic_opt.params
    assert len(optimised) == len(list(critic.parameters()))
    assert all(a is b for a, b in zip(optimised, critic.parameters()))
