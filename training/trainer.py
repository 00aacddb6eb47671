"""The update steps: GRPO, PPO with a critic, critic warm-up, and SFT (for SFT and RFT stages).

Our own loop, because the multi-turn parts do not fit TRL: per-turn credit over token sequences
with masked observations, and PPO with a critic (TRL removed its PPO trainer). See docs/training.md.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from training.losses import (
    aggregate_loss,
    entropy_from_logits,
    kl_penalty,
    ppo_clip_loss,
    token_logprobs,
    value_loss,
)
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


class Trainer:
    """Holds the policy, its frozen reference, the optional critic and their optimisers."""

    def __init__(self, policy: nn.Module, *, optim: OptimConfig, pad_id: int, device: str = "cpu",
                 ref: nn.Module | None = None, critic: CriticModel | None = None) -> None:
        self.policy = policy
        self.ref = ref
        self.critic = critic
        self.pad_id = pad_id
        self.device = torch.device(device)
        self.optim = optim
        self.policy_opt = torch.optim.AdamW(policy.parameters(), lr=optim.lr, betas=tuple(optim.betas),
                                            weight_decay=optim.weight_decay)
        self.critic_opt: torch.optim.Optimizer | None = None
        if critic is not None:
            self.attach_critic(critic)

    def attach_critic(self, critic: CriticModel) -> None:
        self.critic = critic
        self.critic_opt = torch.optim.AdamW(critic.parameters(), lr=self.optim.critic_lr,
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

    def _logprobs(self, model: nn.Module, batch: Batch, temperature: float, entropy: bool
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        lp = token_logprobs(logits, batch.input_ids, temperature)
        ent = entropy_from_logits(logits[:, :-1, :] / temperature) if entropy else None
        return lp, ent

    @torch.no_grad()
    def _frozen_logprobs(self, model: nn.Module, batch: Batch, temperature: float) -> torch.Tensor:
        was = model.training
        model.eval()
        lp, _ = self._logprobs(model, batch, temperature, entropy=False)
        model.train(was)
        return lp

    def _step(self, loss: torch.Tensor, model: nn.Module, opt: torch.optim.Optimizer) -> float:
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.optim.grad_clip)
        opt.step()
        return float(norm)

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
        old_lp = self._frozen_logprobs(self.policy, batch, temperature)
        use_ref = self.ref is not None and algo.kl_coef > 0
        ref_lp = self._frozen_logprobs(self.ref, batch, temperature) if use_ref else None
        stats: dict[str, list[float]] = {k: [] for k in ("policy_loss", "value_loss", "entropy", "clip_fraction",
                                                         "grad_norm", "kl")}
        if ref_lp is not None:
            stats["kl"].append(float(masked_mean(kl_penalty(old_lp, ref_lp, algo.kl_estimator), batch.action_mask)))
        n = batch.input_ids.shape[0]
        for _ in range(algo.ppo_epochs):
            for idx in _minibatches(n, algo.minibatch_size):
                mb = batch.select(idx)
                mask = mb.action_mask
                if update_policy:
                    lp, ent = self._logprobs(self.policy, mb, temperature, entropy=True)
                    assert ent is not None
                    out = ppo_clip_loss(lp, old_lp[idx], advantages[idx], mask, clip_low=algo.clip_low,
                                        clip_high=algo.clip_high, dual_clip=algo.dual_clip)
                    loss = aggregate_loss(out.token_loss, mask, algo.loss_aggregation, norm_length=norm_length)
                    stats["policy_loss"].append(float(loss.detach()))
                    if ref_lp is not None and algo.kl_mode == "loss":
                        kl = kl_penalty(lp, ref_lp[idx], algo.kl_estimator)
                        loss = loss + algo.kl_coef * aggregate_loss(kl, mask, algo.loss_aggregation,
                                                                    norm_length=norm_length)
                    ent_mean = masked_mean(ent, mask)
                    if algo.entropy_coef:
                        loss = loss - algo.entropy_coef * ent_mean
                    stats["entropy"].append(float(ent_mean.detach()))
                    stats["clip_fraction"].append(float(out.clip_fraction))
                    stats["grad_norm"].append(self._step(loss, self.policy, self.policy_opt))
                if self.critic is not None and returns is not None and old_values is not None:
                    assert self.critic_opt is not None
                    values = self.critic.token_values(mb.input_ids, mb.attention_mask)
                    vloss = value_loss(values, old_values[idx], returns[idx], mask, clip=algo.value_clip)
                    stats["value_loss"].append(float(vloss.detach()))
                    self._step(vloss, self.critic, self.critic_opt)
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
        with torch.no_grad():
            self.critic.eval()
            old_values = self.critic.token_values(batch.input_ids, batch.attention_mask)
            self.critic.train()
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
        lp, _ = self._logprobs(self.policy, batch, 1.0, entropy=False)
        loss = -masked_mean(lp, batch.action_mask)
        norm = self._step(loss, self.policy, self.policy_opt)
        return {"sft_loss": float(loss.detach()), "grad_norm": norm}
