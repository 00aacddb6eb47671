"""Token-level objectives: clipped policy loss, KL estimators, entropy, value loss, aggregation.

Shapes: every per-token tensor is [B, T] aligned with the *predicted* tokens (position t holds the
log-probability of ``input_ids[:, t + 1]``); ``mask`` is 1 on the policy's own (action) tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

LOSS_AGGREGATIONS = ("seq_mean_token_mean", "token_mean", "seq_mean_token_sum_norm")
KL_ESTIMATORS = ("k1", "k2", "k3")
ENTROPY_MODES = ("none", "detached", "grad")  # no entropy | a value without a graph | differentiable


@dataclass
class PolicyLossOutput:
    token_loss: torch.Tensor  # [B, T], before masking/aggregation
    clip_fraction: torch.Tensor  # share of action tokens whose ratio was clipped
    dual_clip_fraction: torch.Tensor
    approx_kl_old: torch.Tensor  # mean (old − new) log-prob over action tokens


def ppo_clip_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
    *, clip_low: float = 0.2, clip_high: float = 0.28, dual_clip: float | None = 3.0,
) -> PolicyLossOutput:
    """PPO's clipped surrogate with an asymmetric range and the dual clip.

    ratio ρ = exp(logπ − logπ_old); loss = max(−A ρ, −A clip(ρ, 1 − ε_low, 1 + ε_high)).
    ε_high > ε_low ("clip-higher", DAPO; CUDA Agent uses 0.2/0.28) lets low-probability tokens grow.
    Dual clip (Ye et al. 2020): for A < 0 the loss is also capped at −A·c, so a token whose ratio
    exploded cannot produce an unbounded step.
    """
    ratio = torch.exp(logprobs - old_logprobs)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(loss_unclipped, loss_clipped)
    clipped = (loss_clipped > loss_unclipped).float()
    dual = torch.zeros_like(loss)
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError("dual_clip must be > 1")
        capped = torch.minimum(loss, -advantages * dual_clip)
        dual = ((advantages < 0) & (capped < loss)).float()
        loss = torch.where(advantages < 0, capped, loss)
    mask_f = mask.to(loss.dtype)
    denom = mask_f.sum().clamp(min=1.0)
    return PolicyLossOutput(
        token_loss=loss,
        clip_fraction=(clipped * mask_f).sum() / denom,
        dual_clip_fraction=(dual * mask_f).sum() / denom,
        approx_kl_old=((old_logprobs - logprobs) * mask_f).sum() / denom,
    )


def aggregate_loss(
    token_loss: torch.Tensor, mask: torch.Tensor, mode: str = "seq_mean_token_mean",
    *, norm_length: int | None = None,
) -> torch.Tensor:
    """Reduce a [B, T] token loss to a scalar.

    - ``seq_mean_token_mean``: GRPO's original: mean over each sequence's tokens, then over sequences
      (long responses get less weight per token: the length bias Dr.GRPO points out).
    - ``token_mean``: DAPO: mean over all action tokens of the batch.
    - ``seq_mean_token_sum_norm``: Dr.GRPO: each sequence's token sum divided by one constant
      (``norm_length``, the generation budget; T when not given), then mean over sequences.
    """
    weights = aggregation_weights(mask, mode, norm_length=norm_length).to(token_loss.dtype)
    return (token_loss * weights).sum()


def aggregation_weights(mask: torch.Tensor, mode: str = "seq_mean_token_mean", *,
                        norm_length: int | None = None) -> torch.Tensor:
    """Per-token weights w [B, T] with ``aggregate_loss(x) == (x * w).sum()``.

    Computed once over a whole optimiser batch and sliced per micro-batch, they make the sum of the
    micro-batches' losses the batch's loss exactly, whatever the aggregation (``mask`` is 0/1)."""
    mask_f = mask.float()
    if mode == "seq_mean_token_mean":
        lengths = mask_f.sum(dim=1, keepdim=True)
        sequences = (lengths > 0).float().sum().clamp(min=1.0)
        return mask_f / (lengths.clamp(min=1.0) * sequences)
    if mode == "token_mean":
        return mask_f / mask_f.sum().clamp(min=1.0)
    if mode == "seq_mean_token_sum_norm":
        length = float(norm_length if norm_length is not None else mask.shape[1])
        return mask_f / (length * mask.shape[0])
    raise ValueError(f"unknown loss aggregation {mode!r}; choose from {LOSS_AGGREGATIONS}")


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π ‖ π_ref) from samples of π (Schulman's k1/k2/k3).

    k1 = log π − log π_ref (unbiased, high variance, can be negative);
    k2 = ½ (log π − log π_ref)²;
    k3 = exp(log π_ref − log π) − (log π_ref − log π) − 1 (unbiased, always ≥ 0; GRPO's choice).
    """
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * log_ratio**2
    if estimator == "k3":
        neg = -log_ratio
        return torch.exp(neg) - neg - 1.0
    raise ValueError(f"unknown KL estimator {estimator!r}; choose from {KL_ESTIMATORS}")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Per-position entropy of the categorical distribution given by ``logits`` [..., V]."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)


def _head_chunk(hidden: torch.Tensor, targets: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor],
                temperature: float, entropy: str) -> tuple[torch.Tensor, torch.Tensor | None]:
    logits = head(hidden).float()
    if temperature != 1.0:
        logits = logits / temperature
    lse = torch.logsumexp(logits, dim=-1)
    lp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    if entropy == "none":
        return lp, None
    with torch.set_grad_enabled(torch.is_grad_enabled() and entropy == "grad"):
        # H = logsumexp(z) − Σ softmax(z)·z
        ent = lse - (torch.softmax(logits, dim=-1) * logits).sum(dim=-1)
    return lp, ent


def chunked_head_logprobs(
    hidden: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor], targets: torch.Tensor, *,
    temperature: float = 1.0, chunk_tokens: int = 1024, entropy: str = "none",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log-softmax(head(hidden) / temperature)[targets] for hidden [N, H], targets [N] → [N] fp32.

    At most ``chunk_tokens`` rows of logits (and their fp32 copy) exist at a time; under autograd each
    chunk is checkpointed, so only its hidden rows are kept and the backward pass recomputes its logits.
    ``entropy``: ``none`` | ``detached`` (computed without a graph) | ``grad``."""
    if entropy not in ENTROPY_MODES:
        raise ValueError(f"entropy must be one of {ENTROPY_MODES}, got {entropy!r}")
    if chunk_tokens < 1:
        raise ValueError("chunk_tokens must be ≥ 1")
    lps: list[torch.Tensor] = []
    ents: list[torch.Tensor] = []
    for start in range(0, hidden.shape[0], chunk_tokens):
        h, t = hidden[start:start + chunk_tokens], targets[start:start + chunk_tokens]
        if torch.is_grad_enabled():
            lp, ent = checkpoint(_head_chunk, h, t, head, temperature, entropy, use_reentrant=False)
        else:
            lp, ent = _head_chunk(h, t, head, temperature, entropy)
        lps.append(lp)
        if ent is not None:
            ents.append(ent)
    empty = hidden.new_zeros((0,), dtype=torch.float32)
    lp_all = torch.cat(lps) if lps else empty
    if entropy == "none":
        return lp_all, None
    return lp_all, (torch.cat(ents) if ents else empty)


def value_loss(
    values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
    *, clip: float | None = 0.2,
) -> torch.Tensor:
    """½ · masked mean of max((V − R)², (clip(V, V_old ± ε) − R)²); plain MSE when ``clip`` is None."""
    err = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + torch.clamp(values - old_values, -clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    mask_f = mask.to(err.dtype)
    return 0.5 * (err * mask_f).sum() / mask_f.sum().clamp(min=1.0)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log π(input_ids[:, t+1] | ≤ t) from model logits [B, T, V] → [B, T−1].

    The plain computation (an fp32 copy of all the logits and a full log-softmax): the reference the
    chunked ``chunked_head_logprobs`` is tested and benchmarked against; the trainer does not use it."""
    logits = logits[:, :-1, :].float() / temperature
    targets = input_ids[:, 1:]
    return torch.gather(F.log_softmax(logits, dim=-1), 2, targets.unsqueeze(-1)).squeeze(-1)
