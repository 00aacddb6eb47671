"""Credit assignment: per-turn discounting, GRPO group advantages, GAE over masked tokens.

All functions are small and exact so tests can check them against hand-computed numbers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def discounted_turn_returns(turn_rewards: Sequence[float], gamma: float, *, floor: float = 0.0) -> list[float]:
    """Kevin-32B's per-turn credit: G_t = u_t + γ u_{t+1} + γ² u_{t+2} + … (γ=0.4 in Kevin), over
    the rewards measured above the reward's floor, u_t = r_t − ``floor``.

    A refinement turn gets credit for what the later turns it enabled achieved, discounted. Measuring
    from the floor makes a failed turn worth nothing rather than a penalty that piles up with the
    number of turns: with a −1 floor, raw returns of an all-failed group would differ by its rollouts'
    lengths alone (−1, −1.4, −1.56…) and normalising them would hand out ±1 for nothing.
    """
    returns = [0.0] * len(turn_rewards)
    running = 0.0
    for t in range(len(turn_rewards) - 1, -1, -1):
        running = float(turn_rewards[t]) - floor + gamma * running
        returns[t] = running
    return returns


def grpo_advantages(
    rewards: Sequence[float], *, scale_by_std: bool = True, eps: float = 1e-6
) -> list[float]:
    """Group-relative advantages: (r − mean) / (std + eps) over one group.

    ``scale_by_std=False`` is Dr.GRPO: the std division up-weights groups whose rewards barely
    differ (too easy or too hard) and biases the update; Dr.GRPO keeps only the mean baseline.
    The std here is the population std (divide by n); TRL's GRPOTrainer divides by n − 1.
    """
    n = len(rewards)
    if n == 0:
        return []
    mean = sum(rewards) / n
    centred = [float(r) - mean for r in rewards]
    if not scale_by_std:
        return centred
    std = (sum(c * c for c in centred) / n) ** 0.5
    return [c / (std + eps) for c in centred]


def grpo_turn_advantages(
    group_turn_returns: Sequence[Sequence[float]], *, scale_by_std: bool = True, eps: float = 1e-6
) -> list[list[float]]:
    """GRPO over multi-turn rollouts: normalise every turn's return against all turns of the group.

    ``group_turn_returns[i][t]`` is the (discounted) return of turn t of rollout i of one group.
    """
    flat = [float(r) for turns in group_turn_returns for r in turns]
    flat_adv = grpo_advantages(flat, scale_by_std=scale_by_std, eps=eps)
    out: list[list[float]] = []
    k = 0
    for turns in group_turn_returns:
        out.append(flat_adv[k : k + len(turns)])
        k += len(turns)
    return out


def gae(
    rewards: Sequence[float], values: Sequence[float], *, gamma: float = 1.0, lam: float = 0.95,
    last_value: float = 0.0,
) -> tuple[list[float], list[float]]:
    """Generalised advantage estimation over one trajectory of steps (turns or action tokens).

    δ_t = r_t + γ V_{t+1} − V_t (V_T = ``last_value``, 0 at the end of an episode);
    A_t = δ_t + γλ A_{t+1}; returns R_t = A_t + V_t (the critic's regression target).
    """
    n = len(rewards)
    advantages = [0.0] * n
    running = 0.0
    for t in range(n - 1, -1, -1):
        next_value = values[t + 1] if t + 1 < n else last_value
        delta = float(rewards[t]) + gamma * float(next_value) - float(values[t])
        running = delta + gamma * lam * running
        advantages[t] = running
    returns = [a + float(v) for a, v in zip(advantages, values)]
    return advantages, returns


def masked_gae(
    rewards: torch.Tensor, values: torch.Tensor, action_mask: torch.Tensor, *,
    gamma: float = 1.0, lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over the action tokens of a batch of token sequences, skipping observation tokens.

    ``rewards``, ``values``, ``action_mask``: [B, T]. Observation (and prompt, padding) tokens are
    the environment's, not the policy's: they are removed before the recursion, so the value that
    bootstraps the last token of turn k is the value at the first token of turn k+1, and the
    observation tokens get advantage 0 and return 0 (they are masked out of every loss anyway).
    Rewards placed on masked positions are ignored.
    """
    advantages = torch.zeros_like(values, dtype=torch.float32)
    returns = torch.zeros_like(values, dtype=torch.float32)
    for b in range(rewards.shape[0]):
        idx = torch.nonzero(action_mask[b] > 0, as_tuple=False).flatten()
        if idx.numel() == 0:
            continue
        adv, ret = gae(rewards[b, idx].tolist(), values[b, idx].tolist(), gamma=gamma, lam=lam)
        advantages[b, idx] = torch.tensor(adv, dtype=torch.float32)
        returns[b, idx] = torch.tensor(ret, dtype=torch.float32)
    return advantages, returns


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x − mean) / std over the masked entries (population std); masked-out entries become 0."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + eps) * mask.to(x.dtype)
