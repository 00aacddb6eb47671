"""The update step on a real (tiny) Qwen2: fp32 master weights under bf16, micro-batches that give the
un-micro-batched gradients, gradient checkpointing, LoRA, and the critics (own decoder or a shared base)."""

import copy

import pytest
import torch

from training.policy import ModelSpec, build_model, build_tokenizer, sequence_logprobs
from training.recipes import AlgoConfig, OptimConfig
from training.rollout import Rollout, Turn, TurnOutcome
from training.trainer import MasterAdamW, Trainer, plan_micro_batches
from training.value import CriticModel


def _spec(directory, **kw):
    return ModelSpec(kind="pretrained", name_or_path=str(directory), **kw)


def _rollouts(tok, lengths=((5, 3, 7), (12,), (2, 4, 9), (6, 1, 3)), rewards=(1.0, -1.0, 2.0, 0.5)):
    """One group of multi-turn rollouts of different lengths, with observations between turns."""
    gen = torch.Generator().manual_seed(3)
    out = []
    for i, (turns, reward) in enumerate(zip(lengths, rewards)):
        rollout = Rollout(task_name="t", group=0, index=i, prompt_ids=tok.prompt_ids("", f"task {i}"))
        for k, n in enumerate(turns):
            ids = torch.randint(3, tok.vocab_size, (n,), generator=gen).tolist()
            obs = tok.observation_ids(f"ok {k}") if k < len(turns) - 1 else []
            rollout.turns.append(Turn(action_ids=ids, text="", observation_ids=obs,
                                      outcome=TurnOutcome(reward=reward - k * 0.25, status="ok")))
        out.append(rollout)
    return out


class RecordingTrainer(Trainer):
    """Keeps a copy of the accumulated fp32 gradients of every optimiser step (before clipping)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.grads = []

    def _finish(self, opt):
        self.grads.append([None if m.grad is None else m.grad.clone() for m in opt.masters])
        return super()._finish(opt)


def test_micro_batch_plan_is_longest_first_within_the_budget():
    assert plan_micro_batches([5, 9, 3, 9, 2], 18) == [[1, 3], [0, 2, 4]]
    assert plan_micro_batches([30, 4], 10) == [[0], [1]]  # a row past the budget goes alone
    assert plan_micro_batches([5, 9, 3], 0) == [[1, 0, 2]]
    assert plan_micro_batches([], 8) == []


@pytest.mark.parametrize("aggregation", ["seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm"])
def test_micro_batches_accumulate_the_whole_batch_gradient(hf_model_dir, aggregation):
    # given the same model and rollouts, in one forward, then in micro-batches of ≤ 150 padded tokens (2 rows)
    tok = build_tokenizer(_spec(hf_model_dir))
    rollouts = _rollouts(tok)
    algo = AlgoConfig(group_size=4, turn_credit="discounted", loss_aggregation=aggregation, entropy_coef=0.01)
    results = []
    for budget in (0, 150):
        model = build_model(_spec(hf_model_dir), tok, seed=0)
        trainer = RecordingTrainer(model, optim=OptimConfig(lr=1e-3, micro_batch_tokens=budget,
                                                            logprob_chunk_tokens=16), pad_id=tok.pad_token_id)
        assert len(trainer._micro(trainer._to(_batch(rollouts, tok)))) == (1 if budget == 0 else 2)
        results.append((trainer.grpo_step(rollouts, algo, norm_length=40), trainer.grads[0]))
    (whole, g_whole), (micro, g_micro) = results
    # then the loss, its statistics and every gradient agree
    for key in ("policy_loss", "entropy", "clip_fraction", "grad_norm"):
        assert micro[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-7), key
    assert whole["grad_norm"] > 0
    for a, b in zip(g_whole, g_micro):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-7)


def _batch(rollouts, tok):
    from training.trainer import batch_from_rollouts

    return batch_from_rollouts(rollouts, tok.pad_token_id)


def test_ppo_micro_batches_give_the_same_policy_and_critic_gradients(hf_model_dir):
    tok = build_tokenizer(_spec(hf_model_dir))
    rollouts = _rollouts(tok)
    runs = []
    for budget in (0, 50):
        model = build_model(_spec(hf_model_dir), tok, seed=0)
        critic = CriticModel(build_model(_spec(hf_model_dir), tok, seed=0))
        with torch.no_grad():
            critic.value_head.proj.weight.normal_(0, 0.1, generator=torch.Generator().manual_seed(0))
        optim = OptimConfig(lr=1e-3, critic_lr=1e-3, micro_batch_tokens=budget)
        trainer = RecordingTrainer(model, optim=optim, pad_id=tok.pad_token_id, critic=critic)
        runs.append((trainer.ppo_step(rollouts, AlgoConfig(loss_aggregation="token_mean")), trainer.grads))
    (whole, g_whole), (micro, g_micro) = runs
    assert micro["value_loss"] == pytest.approx(whole["value_loss"], rel=1e-5) and whole["value_loss"] > 0
    assert len(g_whole) == len(g_micro) == 2  # the policy's step, then the critic's
    for step_whole, step_micro in zip(g_whole, g_micro):
        for a, b in zip(step_whole, step_micro):
            if a is None:
                assert b is None
            else:
                torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-7)


def test_bf16_weights_move_at_lr_1e6_through_fp32_masters(hf_model_dir):
    # given a bf16 model and 10 SFT steps at the recipes' lr 1e-6
    tok = build_tokenizer(_spec(hf_model_dir, dtype="bfloat16"))
    data = [(r.token_ids(), r.action_mask(), r.turn_spans()) for r in _rollouts(tok)]

    def changed(before, after):
        return sum(int((a != b).sum()) for a, b in zip(before, after)) / sum(a.numel() for a in before)

    model = build_model(_spec(hf_model_dir, dtype="bfloat16"), tok, seed=0)
    trainer = Trainer(model, optim=OptimConfig(lr=1e-6), pad_id=tok.pad_token_id)
    layers = [i for i, (n, _) in enumerate(model.named_parameters()) if ".layers." in n]
    start = [trainer.policy_opt.masters[i].clone() for i in layers]
    assert all(m.dtype == torch.float32 for m in start)
    for _ in range(10):
        trainer.sft_step(data)
    masters = [trainer.policy_opt.masters[i] for i in layers]
    # then nearly every fp32 master value of the transformer layers moved
    assert changed(start, masters) > 0.95
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())

    # contrast: plain AdamW on the bf16 weights (the bug) rounds nearly every update away
    plain = build_model(_spec(hf_model_dir, dtype="bfloat16"), tok, seed=0)
    opt = torch.optim.AdamW(plain.parameters(), lr=1e-6)
    bug_start = [p.detach().clone() for i, p in enumerate(plain.parameters()) if i in layers]
    batch = _batch(_rollouts(tok), tok)
    for _ in range(10):
        lp, _ = sequence_logprobs(plain, batch.input_ids, batch.attention_mask, positions=batch.action_mask)
        opt.zero_grad()
        (-(lp * batch.action_mask).sum() / batch.action_mask.sum()).backward()
        opt.step()
    bug_after = [p.detach() for i, p in enumerate(plain.parameters()) if i in layers]
    assert changed(bug_start, bug_after) < 0.2


def test_master_weights_survive_a_checkpoint_round_trip(hf_model_dir):
    tok = build_tokenizer(_spec(hf_model_dir, dtype="bfloat16"))
    data = [(r.token_ids(), r.action_mask(), r.turn_spans()) for r in _rollouts(tok)]
    model = build_model(_spec(hf_model_dir, dtype="bfloat16"), tok, seed=0)
    trainer = Trainer(model, optim=OptimConfig(lr=1e-6), pad_id=tok.pad_token_id)
    trainer.sft_step(data)
    # (deep copies: a state dict holds the live tensors, a checkpoint file does not)
    saved_model, saved_opt = copy.deepcopy(model.state_dict()), copy.deepcopy(trainer.policy_opt.state_dict())
    # when a fresh model and trainer load them (the runner's order: model, then optimiser)
    again = build_model(_spec(hf_model_dir, dtype="bfloat16"), tok, seed=1)
    resumed = Trainer(again, optim=OptimConfig(lr=1e-6), pad_id=tok.pad_token_id)
    again.load_state_dict(saved_model)
    resumed.policy_opt.load_state_dict(saved_opt)
    # then the masters are restored exactly and the next step gives the same weights
    for a, b in zip(trainer.policy_opt.masters, resumed.policy_opt.masters):
        assert torch.equal(a, b)
    trainer.sft_step(data)
    resumed.sft_step(data)
    for a, b in zip(model.parameters(), again.parameters()):
        assert torch.equal(a, b)


def test_an_old_plain_adamw_state_resyncs_the_masters_from_the_model(hf_model_dir):
    tok = build_tokenizer(_spec(hf_model_dir, dtype="bfloat16"))
    model = build_model(_spec(hf_model_dir, dtype="bfloat16"), tok, seed=0)
    opt = MasterAdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), weight_decay=0.0)
    plain_state = torch.optim.AdamW([torch.zeros(1, requires_grad=True) for _ in opt.masters]).state_dict()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the model was loaded from a checkpoint after the optimiser was made
    opt.load_state_dict(plain_state)
    for p, m in zip(opt.params, opt.masters):
        assert torch.equal(m, p.float())


def test_weights_loaded_into_the_model_after_the_optimiser_are_not_reverted(hf_model_dir):
    # given a trainer made before the model is loaded from elsewhere (no optimiser state to restore)
    tok = build_tokenizer(_spec(hf_model_dir, dtype="bfloat16"))
    data = [(r.token_ids(), r.action_mask(), r.turn_spans()) for r in _rollouts(tok)]
    model = build_model(_spec(hf_model_dir, dtype="bfloat16"), tok, seed=0)
    trainer = Trainer(model, optim=OptimConfig(lr=1e-6), pad_id=tok.pad_token_id)
    loaded = build_model(_spec(hf_model_dir, dtype="bfloat16"), tok, seed=0).state_dict()
    with torch.no_grad():
        for value in loaded.values():
            value.mul_(-1.0)
    model.load_state_dict(loaded)
    # when it steps
    trainer.sft_step(data)
    # then the step started from the loaded weights (moved by ≤ a few lr), not from the stale masters
    for name, p in model.named_parameters():
        assert torch.allclose(p.float(), loaded[name].float(), atol=1e-4), name


def test_gradient_checkpointing_gives_the_same_gradients(hf_model_dir):
    tok = build_tokenizer(_spec(hf_model_dir))
    rollouts = _rollouts(tok)
    grads = []
    for ckpt in (False, True):
        model = build_model(_spec(hf_model_dir, gradient_checkpointing=ckpt), tok, seed=0)
        flag = getattr(model, "is_activation_checkpointing", None)
        assert (flag if flag is not None else model.is_gradient_checkpointing) is ckpt
        trainer = RecordingTrainer(model, optim=OptimConfig(lr=1e-3), pad_id=tok.pad_token_id)
        trainer.grpo_step(rollouts, AlgoConfig(group_size=4))
        grads.append(trainer.grads[0])
    for a, b in zip(*grads):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)


def test_lora_trains_only_the_adapters(hf_model_dir):
    # given a bf16 base with rank-4 adapters on every linear layer
    spec = _spec(hf_model_dir, dtype="bfloat16", lora_rank=4, lora_alpha=8)
    tok = build_tokenizer(spec)
    model = build_model(spec, tok, seed=0)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert any("q_proj.lora_A" in n for n in trainable) and any("down_proj.lora_B" in n for n in trainable)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = Trainer(model, optim=OptimConfig(lr=1e-2), pad_id=tok.pad_token_id)
    assert len(trainer.policy_opt.masters) == len(trainable)
    # when two GRPO steps run (lora_B starts at 0, so the first step moves only B)
    for _ in range(2):
        trainer.grpo_step(_rollouts(tok), AlgoConfig(group_size=4))
    # then every adapter moved and no base weight did
    for n, p in model.named_parameters():
        assert torch.equal(before[n], p) is (n not in trainable), n


def test_the_critic_keeps_the_decoder_and_no_lm_head(hf_model_dir):
    tok = build_tokenizer(_spec(hf_model_dir))
    model = build_model(_spec(hf_model_dir), tok, seed=0)
    critic = CriticModel(model)
    names = [n for n, _ in critic.named_parameters()]
    assert not any("lm_head" in n for n in names)
    total = sum(p.numel() for p in model.parameters())
    assert sum(p.numel() for p in critic.parameters()) == total - model.lm_head.weight.numel() + 32 + 1
    ids = torch.tensor([tok.prompt_ids("", "x")])
    with torch.no_grad():
        critic.value_head.proj.weight.fill_(0.5)
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        values = critic.token_values(ids, torch.ones_like(ids))
    torch.testing.assert_close(values, (hidden @ torch.full((32,), 0.5))[:, :-1])


def test_a_critic_sharing_the_lora_base_trains_its_own_adapter(hf_model_dir):
    # given a LoRA policy and a critic on the same base with its own adapter
    spec = _spec(hf_model_dir, lora_rank=4, lora_alpha=8)
    tok = build_tokenizer(spec)
    policy = build_model(spec, tok, seed=0)
    critic = CriticModel.sharing(policy)
    critic_names = {n for n, _ in critic.named_parameters()}
    assert critic_names and all(n.startswith(("adapter_weights.", "value_head.")) for n in critic_names)
    assert len(critic.state_dict()) == len(critic_names)  # the base is not in the critic's state
    policy_params = {n: p.detach().clone() for n, p in policy.named_parameters()}
    batch = _batch(_rollouts(tok), tok)
    with torch.no_grad():
        lp_before, _ = sequence_logprobs(policy, batch.input_ids, batch.attention_mask,
                                         positions=batch.action_mask)
    optim = OptimConfig(lr=1e-2, critic_lr=1e-2)
    trainer = Trainer(policy, optim=optim, pad_id=tok.pad_token_id, critic=critic)
    # when the critic warms up (three steps: the zero value head first passes gradient to the adapter later)
    for _ in range(3):
        stats = trainer.ppo_step(_rollouts(tok), AlgoConfig(), update_policy=False)
    assert stats["value_loss"] > 0
    # then only the critic's adapter moved, and the policy computes exactly what it did
    moved = {n for n, p in policy.named_parameters() if not torch.equal(policy_params[n], p)}
    assert moved and all(".critic." in n for n in moved)
    assert any("lora_A.critic" in n for n in moved)
    with torch.no_grad():
        lp_after, _ = sequence_logprobs(policy, batch.input_ids, batch.attention_mask,
                                        positions=batch.action_mask)
    assert torch.equal(lp_before, lp_after)
    assert policy.active_adapter == "default"


@pytest.mark.gpu
@pytest.mark.parametrize("lora", [0, 4])
def test_bf16_steps_on_cuda_with_fused_master_adamw(hf_model_dir, lora):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    # given the directory's model in bf16 on the GPU, micro-batched, checkpointed, LoRA or not
    spec = _spec(hf_model_dir, dtype="bfloat16", gradient_checkpointing=True, lora_rank=lora, lora_alpha=8)
    tok = build_tokenizer(spec)
    policy = build_model(spec, tok, seed=0).cuda()
    critic = (CriticModel.sharing(policy) if lora else CriticModel(build_model(spec, tok, seed=0))).cuda()
    optim = OptimConfig(lr=1e-6, critic_lr=1e-5, micro_batch_tokens=150, logprob_chunk_tokens=32)
    trainer = Trainer(policy, optim=optim, pad_id=tok.pad_token_id, device="cuda", critic=critic)
    assert trainer.policy_opt.inner.defaults["fused"] is True
    before = [m.clone() for m in trainer.policy_opt.masters]
    # when it takes a GRPO step and a PPO step
    grpo = trainer.grpo_step(_rollouts(tok), AlgoConfig(group_size=4))
    ppo = trainer.ppo_step(_rollouts(tok), AlgoConfig())
    # then both moved the masters, stayed finite, and the model stayed bf16 where it was
    assert grpo["grad_norm"] > 0 and ppo["grad_norm"] > 0 and ppo["value_loss"] > 0
    assert all(torch.isfinite(m).all() and not torch.equal(a, m) for a, m in zip(before, trainer.policy_opt.masters)
               if m.ndim > 1)
    assert {p.dtype for n, p in policy.named_parameters() if "lora_" not in n} == {torch.bfloat16}
