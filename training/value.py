"""The critic: a causal-LM backbone with a scalar value head, one value per token.

CUDA Agent trains a separate critic (initialised from the policy, then pre-trained on the policy's
rollouts before agentic PPO); we do the same: ``CriticModel`` wraps its own backbone so the policy's
and the critic's updates never interfere.
"""

from __future__ import annotations

import torch
from torch import nn


class ValueHead(nn.Module):
    """hidden [B, T, H] → value [B, T]. Zero-initialised so a fresh critic predicts 0 everywhere."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.proj = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.float()).squeeze(-1)


class CriticModel(nn.Module):
    """A transformers causal LM used as a backbone (its last hidden state) plus a ``ValueHead``."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = ValueHead(int(backbone.config.hidden_size))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        out = self.backbone(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
        return self.value_head(out.hidden_states[-1])

    def token_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Values aligned with the predicted tokens: position t is V(state before token t+1) → [B, T−1]."""
        return self.forward(input_ids, attention_mask)[:, :-1]
