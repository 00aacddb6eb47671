"""The update steps: GRPO, PPO with a critic, critic warm-up, and SFT (for SFT and RFT stages).

Our own loop, because the multi-turn parts do not fit TRL: per-turn credit over token sequences
with masked observations, and PPO with a critic (TRL removed its PPO trainer). See docs/training.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from training.advantages import (
    discounted_turn_returns,
    grpo_advantages,
    grpo_turn_advantages,
    masked_gae,
    masked_mean,
    masked_whiten,
)
from training.losses import aggregation_weights, kl_penalty, ppo_clip_loss, value_loss
from training.policy import sequence_logprobs
from training.recipes import AlgoConfig, OptimConfig
from training.rollout import Rollout
from training.value import CriticModel


@dataclass
class Batch:
    """Right-padded token sequences; per-token tensors are [B, T−1], aligned with predicted tokens."""

    input_ids: torch.Tensor  # [B, T]
    attention_mask: torch.Tensor  # [B, T]
    action_mask: torch.Tensor  # [B, T−1] float: 1 where the predicted token is the policy's
    turn_ends: list[list[int]]  # per sequence, the [B, T−1] position of each turn's last action token
    turn_spans: list[list[tuple[int, int]]]  # per sequence, [start, end) of each turn in [B, T−1] space

    def select(self, idx: Sequence[int]) -> Batch:
        index = torch.tensor(list(idx), dtype=torch.long)
        return Batch(self.input_ids[index], self.attention_mask[index], self.action_mask[index],
                     [self.turn_ends[i] for i in idx], [self.turn_spans[i] for i in idx])


def build_batch(sequences: Sequence[tuple[list[int], list[int], list[tuple[int, int]]]], pad_id: int) -> Batch:
    """From (token ids, action mask over ids, turn spans over ids) triples."""
    width = max(len(ids) for ids, _, _ in sequences)
    n = len(sequences)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    action = torch.zeros((n, width), dtype=torch.float32)
    turn_ends, turn_spans = [], []
    for b, (ids, mask, spans) in enumerate(sequences):
        input_ids[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention[b, : len(ids)] = 1
        action[b, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
        # token at position p is predicted at position p − 1
        shifted = [(s - 1, e - 1) for s, e in spans if e > s]
        turn_spans.append(shifted)
        turn_ends.append([e - 1 for _, e in shifted])
    return Batch(input_ids, attention, action[:, 1:].contiguous(), turn_ends, turn_spans)


def batch_from_rollouts(rollouts: Sequence[Rollout], pad_id: int) -> Batch:
    return build_batch([(r.token_ids(), r.action_mask(), r.turn_spans()) for r in rollouts], pad_id)


def grpo_token_advantages(rollouts: Sequence[Rollout], batch: Batch, algo: AlgoConfig) -> torch.Tensor:
    """Group-normalised advantages, broadcast to every action token of the turn they belong to."""
    adv = torch.zeros_like(batch.action_mask)
    groups: dict[int, list[int]] = {}
    for i, r in enumerate(rollouts):
        groups.setdefault(r.group, []).append(i)
    for members in groups.values():
        if algo.turn_credit == "outcome":
            values = grpo_advantages([rollouts[i].outcome_reward for i in members],
                                     scale_by_std=algo.scale_rewards_by_std)
            per_turn = [[v] * len(rollouts[i].turns) for v, i in zip(values, members)]
        else:
            returns = [discounted_turn_returns(rollouts[i].turn_rewards, algo.turn_gamma,
                                               floor=rollouts[i].reward_floor) for i in members]
            per_turn = grpo_turn_advantages(returns, scale_by_std=algo.scale_rewards_by_std)
        for i, turn_adv in zip(members, per_turn):
            for (s, e), a in zip(batch.turn_spans[i], turn_adv):
                adv[i, s:e] = a
    return adv * batch.action_mask


def ppo_token_rewards(rollouts: Sequence[Rollout], batch: Batch, algo: AlgoConfig) -> torch.Tensor:
    """Sparse rewards on the last action token of a turn: every turn (``discounted``) or only the
    rollout's outcome on its last token (``outcome``)."""
    rewards = torch.zeros_like(batch.action_mask)
    for i, r in enumerate(rollouts):
        ends = batch.turn_ends[i]
        if not ends:
            continue
        if algo.turn_credit == "outcome":
            rewards[i, ends[-1]] = r.outcome_reward
        else:
            for pos, value in zip(ends, r.turn_rewards):
                rewards[i, pos] += value
    return rewards


def _minibatches(n: int, size: int) -> list[list[int]]:
    size = n if size <= 0 else size
    return [list(range(s, min(n, s + size))) for s in range(0, n, size)]


def plan_micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Split rows into micro-batches whose padded size (rows × longest row) stays within ``token_budget``.

    Rows are taken longest first so that rows of similar length share a micro-batch (little padding);
    a row longer than the budget is a micro-batch of its own. ``token_budget <= 0``: one micro-batch."""
    order = sorted(range(len(lengths)), key=lambda i: (-int(lengths[i]), i))
    if token_budget <= 0:
        return [order] if order else []
    plans: list[list[int]] = []
    for i in order:
        if plans and (len(plans[-1]) + 1) * int(lengths[plans[-1][0]]) <= token_budget:
            plans[-1].append(i)
        else:
            plans.append([i])
    return plans


class MasterAdamW:
    """AdamW whose state and update live in fp32 whatever the model's dtype.

    Each trainable parameter stored in a lower precision (bf16) gets an fp32 master copy; a hook moves
    its gradient into the master's fp32 gradient as soon as autograd has accumulated it (so micro-batch
    gradients add up in fp32 and the bf16 gradient is freed at once), AdamW updates the masters, and
    the step writes them back, rounded, into the model. Without masters, an update smaller than half a
    bf16 step (lr 1e-6 on a weight of 0.02) rounds away and the model never changes. fp32 parameters are
    their own masters. ``state_dict`` carries the masters, so a resumed run keeps the sub-bf16 progress.
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], *, lr: float, betas: tuple[float, float],
                 weight_decay: float) -> None:
        unique: dict[int, torch.nn.Parameter] = {}
        for p in params:
            if p.requires_grad:
                unique.setdefault(id(p), p)
        self.params = list(unique.values())
        self.masters: list[torch.Tensor] = []
        self._hooks = []
        for p in self.params:
            if p.dtype == torch.float32:
                self.masters.append(p)
                continue
            master = p.detach().float().clone()
            self.masters.append(master)
            self._hooks.append(p.register_post_accumulate_grad_hook(_into_master(master)))
        if not self.masters:
            raise ValueError("nothing to optimise: the model has no trainable parameters")
        self._versions = [p._version for p in self.params]
        fused = all(m.is_cuda for m in self.masters)  # one kernel per step over all the fp32 state
        self.inner = torch.optim.AdamW(self.masters, lr=lr, betas=betas, weight_decay=weight_decay,
                                       fused=fused or None)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    def zero_grad(self) -> None:
        for p, m in zip(self.params, self.masters):
            p.grad = None
            m.grad = None

    def clip_grad_norm(self, max_norm: float) -> float:
        grads = [m for m in self.masters if m.grad is not None]
        if not grads:
            return 0.0
        return float(torch.nn.utils.clip_grad_norm_(grads, max_norm))

    @torch.no_grad()
    def step(self) -> None:
        # A weight written in place since the last step (a checkpoint or a state dict loaded into the model)
        # is newer than its master: take it, rather than overwrite it with the stale master.
        for p, m, seen in zip(self.params, self.masters, self._versions):
            if p is not m and p._version != seen:
                m.copy_(p)
        self.inner.step()
        self._write_back()

    def _write_back(self) -> None:
        for p, m in zip(self.params, self.masters):
            if p is not m:
                p.copy_(m)
        self._versions = [p._version for p in self.params]

    @torch.no_grad()
    def sync_from_model(self) -> None:
        """Reset the masters to the model's weights (after the model was loaded from elsewhere)."""
        for p, m in zip(self.params, self.masters):
            if p is not m:
                m.copy_(p)
        self._versions = [p._version for p in self.params]

    def state_dict(self) -> dict[str, Any]:
        return {"adamw": self.inner.state_dict(),
                "masters": [m.detach().cpu() for p, m in zip(self.params, self.masters) if p is not m]}

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "adamw" not in state:  # a plain AdamW state dict (checkpoints written before master weights)
            self.inner.load_state_dict(state)
            self.sync_from_model()
            return
        self.inner.load_state_dict(state["adamw"])
        lowp = [m for p, m in zip(self.params, self.masters) if p is not m]
        if len(state["masters"]) != len(lowp):
            raise ValueError(f"checkpoint has {len(state['masters'])} master tensors, model has {len(lowp)}")
        for m, saved in zip(lowp, state["masters"]):
            m.copy_(saved)
        self._write_back()


def _into_master(master: torch.Tensor) -> Callable[[torch.Tensor], None]:
    def hook(param: torch.Tensor) -> None:
        grad = param.grad
        if grad is None:
            return
        if master.grad is None:
            master.grad = grad.float()
        else:
            master.grad.add_(grad)
        param.grad = None

    return hook


@dataclass
class _Micro:
    rows: list[int]  # indices into the optimiser batch
    batch: Batch  # those rows, trimmed to their longest sequence
    width: int  # per-token tensors of these rows: [:, :width]


class Trainer:
    """Holds the policy, its frozen reference, the optional critic and their optimisers.

    Memory: every forward is split into micro-batches of at most ``optim.micro_batch_tokens`` padded
    tokens (gradients accumulate over them; the loss of each is weighted so that their sum is the
    optimiser batch's loss), the LM head runs ``optim.logprob_chunk_tokens`` positions at a time and
    only on action tokens, and the entropy has a graph only when ``entropy_coef`` is non-zero."""

    def __init__(self, policy: nn.Module, *, optim: OptimConfig, pad_id: int, device: str = "cpu",
                 ref: nn.Module | None = None, critic: CriticModel | None = None) -> None:
        self.policy = policy
        self.ref = ref
        self.critic = critic
        self.pad_id = pad_id
        self.device = torch.device(device)
        self.optim = optim
        self.policy_opt = MasterAdamW(policy.parameters(), lr=optim.lr, betas=tuple(optim.betas),
                                      weight_decay=optim.weight_decay)
        self.critic_opt: MasterAdamW | None = None
        if critic is not None:
            self.attach_critic(critic)

    def attach_critic(self, critic: CriticModel) -> None:
        self.critic = critic
        self.critic_opt = MasterAdamW(critic.parameters(), lr=self.optim.critic_lr,
                                      betas=tuple(self.optim.betas), weight_decay=self.optim.weight_decay)

    def set_optim(self, optim: OptimConfig) -> None:
        self.optim = optim
        for group in self.policy_opt.param_groups:
            group["lr"] = optim.lr
        if self.critic_opt is not None:
            for group in self.critic_opt.param_groups:
                group["lr"] = optim.critic_lr

    # -- forward helpers ------------------------------------------------------------------------------
    def _to(self, batch: Batch) -> Batch:
        d = self.device
        return Batch(batch.input_ids.to(d), batch.attention_mask.to(d), batch.action_mask.to(d),
                     batch.turn_ends, batch.turn_spans)

    def _micro(self, batch: Batch) -> list[_Micro]:
        lengths = batch.attention_mask.sum(dim=1).tolist()
        out = []
        for rows in plan_micro_batches(lengths, self.optim.micro_batch_tokens):
            width = max(2, int(max(lengths[i] for i in rows)))
            sub = batch.select(rows)
            trimmed = Batch(sub.input_ids[:, :width], sub.attention_mask[:, :width],
                            sub.action_mask[:, : width - 1], sub.turn_ends, sub.turn_spans)
            out.append(_Micro(rows, trimmed, width - 1))
        return out

    def _logprobs(self, model: nn.Module, batch: Batch, temperature: float, entropy: str = "none"
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return sequence_logprobs(model, batch.input_ids, batch.attention_mask, temperature=temperature,
                                 positions=batch.action_mask, entropy=entropy,
                                 chunk_tokens=self.optim.logprob_chunk_tokens)

    @torch.no_grad()
    def _frozen_logprobs(self, model: nn.Module, batch: Batch, temperature: float) -> torch.Tensor:
        """Log-probs of a whole batch without a graph, micro-batch by micro-batch."""
        was = model.training
        model.eval()
        out = torch.zeros_like(batch.action_mask)
        for micro in self._micro(batch):
            lp, _ = self._logprobs(model, micro.batch, temperature)
            out[micro.rows, : micro.width] = lp
        model.train(was)
        return out

    @torch.no_grad()
    def _frozen_values(self, batch: Batch) -> torch.Tensor:
        assert self.critic is not None
        was = self.critic.training
        self.critic.eval()
        out = torch.zeros_like(batch.action_mask)
        for micro in self._micro(batch):
            out[micro.rows, : micro.width] = self.critic.token_values(micro.batch.input_ids,
                                                                      micro.batch.attention_mask)
        self.critic.train(was)
        return out

    def _finish(self, opt: MasterAdamW) -> float:
        norm = opt.clip_grad_norm(self.optim.grad_clip)
        opt.step()
        opt.zero_grad()
        return norm

    # -- GRPO -------------------------------------------------------------------------------------------
    def grpo_step(self, rollouts: Sequence[Rollout], algo: AlgoConfig, *, temperature: float = 1.0,
                  norm_length: int | None = None) -> dict[str, Any]:
        batch = self._to(batch_from_rollouts(rollouts, self.pad_id))
        advantages = grpo_token_advantages(rollouts, batch, algo).to(self.device)
        return self._policy_update(batch, advantages, algo, temperature=temperature, norm_length=norm_length)

    def _policy_update(self, batch: Batch, advantages: torch.Tensor, algo: AlgoConfig, *, temperature: float,
                       norm_length: int | None, old_values: torch.Tensor | None = None,
                       returns: torch.Tensor | None = None, update_policy: bool = True) -> dict[str, Any]:
        self.policy.train()
        old_lp = self._frozen_logprobs(self.policy, batch, temperature) if update_policy else None
        use_ref = self.ref is not None and algo.kl_coef > 0 and update_policy
        ref_lp = self._frozen_logprobs(self.ref, batch, temperature) if use_ref else None
        keys = ("policy_loss", "value_loss", "entropy", "clip_fraction", "grad_norm", "kl")
        stats: dict[str, list[float]] = {k: [] for k in keys}
        if ref_lp is not None and old_lp is not None:
            kl_old = kl_penalty(old_lp, ref_lp, algo.kl_estimator)
            stats["kl"].append(float(masked_mean(kl_old, batch.action_mask)))
        entropy_mode = "grad" if algo.entropy_coef else "detached"
        n = batch.input_ids.shape[0]
        for _ in range(algo.ppo_epochs):
            for idx in _minibatches(n, algo.minibatch_size):
                mb = batch.select(idx)
                weights = aggregation_weights(mb.action_mask, algo.loss_aggregation, norm_length=norm_length)
                token_share = mb.action_mask / mb.action_mask.sum().clamp(min=1.0)  # a masked mean's weights
                micros = self._micro(mb)
                if update_policy:
                    assert old_lp is not None
                    sums = {"policy_loss": 0.0, "entropy": 0.0, "clip_fraction": 0.0}
                    self.policy_opt.zero_grad()
                    for micro in micros:
                        rows, w = micro.rows, micro.width
                        mask = micro.batch.action_mask
                        pick = [idx[r] for r in rows]
                        lp, ent = self._logprobs(self.policy, micro.batch, temperature, entropy_mode)
                        assert ent is not None
                        out = ppo_clip_loss(lp, old_lp[pick, :w], advantages[pick, :w], mask,
                                            clip_low=algo.clip_low, clip_high=algo.clip_high,
                                            dual_clip=algo.dual_clip)
                        wt = weights[rows, :w]
                        share = token_share[rows, :w]
                        loss = (out.token_loss * wt).sum()
                        sums["policy_loss"] += float(loss.detach())
                        if ref_lp is not None and algo.kl_mode == "loss":
                            kl = kl_penalty(lp, ref_lp[pick, :w], algo.kl_estimator)
                            loss = loss + algo.kl_coef * (kl * wt).sum()
                        ent_mean = (ent * share).sum()
                        if algo.entropy_coef:
                            loss = loss - algo.entropy_coef * ent_mean
                        sums["entropy"] += float(ent_mean.detach())
                        sums["clip_fraction"] += float(out.clip_fraction) * float(share.sum())
                        if loss.requires_grad:
                            loss.backward()
                    for k, v in sums.items():
                        stats[k].append(v)
                    stats["grad_norm"].append(self._finish(self.policy_opt))
                if self.critic is not None and returns is not None and old_values is not None:
                    assert self.critic_opt is not None
                    total = 0.0
                    self.critic_opt.zero_grad()
                    tokens = mb.action_mask.sum().clamp(min=1.0)
                    for micro in micros:
                        rows, w = micro.rows, micro.width
                        pick = [idx[r] for r in rows]
                        with self.critic.active():  # its forward and backward (recomputed layers) alike
                            values = self.critic.token_values(micro.batch.input_ids, micro.batch.attention_mask)
                            mask = micro.batch.action_mask
                            vloss = value_loss(values, old_values[pick, :w], returns[pick, :w], mask,
                                               clip=algo.value_clip)
                            # value_loss is a masked mean over the micro-batch: reweight it to the minibatch's
                            vloss = vloss * mask.sum().clamp(min=1.0) / tokens
                            total += float(vloss.detach())
                            if vloss.requires_grad:
                                vloss.backward()
                    stats["value_loss"].append(total)
                    self._finish(self.critic_opt)
        return {k: (sum(v) / len(v) if v else None) for k, v in stats.items()}

    # -- PPO and critic warm-up -------------------------------------------------------------------------
    def ppo_step(self, rollouts: Sequence[Rollout], algo: AlgoConfig, *, temperature: float = 1.0,
                 norm_length: int | None = None, update_policy: bool = True) -> dict[str, Any]:
        if self.critic is None:
            raise RuntimeError("PPO needs a critic: attach_critic() first")
        batch = self._to(batch_from_rollouts(rollouts, self.pad_id))
        rewards = ppo_token_rewards(rollouts, batch, algo).to(self.device)
        if self.ref is not None and algo.kl_coef > 0 and algo.kl_mode == "reward":
            old_lp = self._frozen_logprobs(self.policy, batch, temperature)
            ref_lp = self._frozen_logprobs(self.ref, batch, temperature)
            rewards = rewards - algo.kl_coef * kl_penalty(old_lp, ref_lp, "k1") * batch.action_mask
        old_values = self._frozen_values(batch)
        advantages, returns = masked_gae(rewards.cpu(), old_values.cpu(), batch.action_mask.cpu(),
                                         gamma=algo.gamma, lam=algo.lam)
        advantages, returns = advantages.to(self.device), returns.to(self.device)
        if algo.whiten_advantages:
            advantages = masked_whiten(advantages, batch.action_mask)
        return self._policy_update(batch, advantages, algo, temperature=temperature, norm_length=norm_length,
                                   old_values=old_values, returns=returns, update_policy=update_policy)

    # -- SFT / RFT ---------------------------------------------------------------------------------------
    def sft_step(self, sequences: Sequence[tuple[list[int], list[int], list[tuple[int, int]]]]) -> dict[str, Any]:
        """Cross-entropy on the action tokens (mean over all of them)."""
        if not sequences:
            return {"sft_loss": None, "grad_norm": None}
        self.policy.train()
        batch = self._to(build_batch(sequences, self.pad_id))
        share = batch.action_mask / batch.action_mask.sum().clamp(min=1.0)
        total = 0.0
        self.policy_opt.zero_grad()
        for micro in self._micro(batch):
            lp, _ = self._logprobs(self.policy, micro.batch, 1.0)
            loss = -(lp * share[micro.rows, : micro.width]).sum()
            total += float(loss.detach())
            if loss.requires_grad:
                loss.backward()
        norm = self._finish(self.policy_opt)
        return {"sft_loss": total, "grad_norm": norm}
