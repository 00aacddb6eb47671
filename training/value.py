"""The critic: a causal LM's decoder (no LM head) with a scalar value head, one value per token.

CUDA Agent trains a separate critic (initialised from the policy, then pre-trained on the policy's
rollouts before agentic PPO). ``CriticModel(causal_lm)`` keeps only the decoder of the model it is given
(the [B, T, V] logits are never computed, the head's weights are not kept) plus a ``ValueHead`` on the
final hidden state. Under LoRA a copy of the policy trains only its adapters and the head;
``CriticModel.sharing(policy)`` instead adds a second LoRA adapter, a copy of the policy's, to the policy's
own base, so one copy of the base weights serves both (the policy's and the critic's updates touch
disjoint weights).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from training.policy import causal_lm_parts

CRITIC_ADAPTER = "critic"


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
    """The decoder of a transformers causal LM (LoRA-wrapped or not) plus a ``ValueHead``.

    ``share_adapter``: add a LoRA adapter of that name to ``backbone`` (a LoRA policy) and use the
    policy's base through it instead of owning a decoder (see ``sharing``)."""

    def __init__(self, backbone: nn.Module, *, share_adapter: str | None = None) -> None:
        super().__init__()
        decoder, _ = causal_lm_parts(backbone)
        self._shared: tuple[Any, str] | None = None  # (the policy's PeftModel, this critic's adapter)
        if share_adapter is None:
            self.backbone = decoder
        else:
            self.adapter_weights = nn.ParameterList(_add_adapter(backbone, share_adapter))
            object.__setattr__(self, "_decoder", decoder)  # not a submodule: the policy owns its base
            self._shared = (backbone, share_adapter)
        self.value_head = ValueHead(int(decoder.config.hidden_size))

    @classmethod
    def sharing(cls, policy: nn.Module, *, adapter: str = CRITIC_ADAPTER) -> CriticModel:
        """A critic on the LoRA policy's own base weights with its own adapter (the policy's LoRA config),
        starting as a copy of the policy's adapter (a critic starts from the actor as it stands): its
        parameters and state dict are that adapter and the value head. The policy's adapter stays the
        active one outside ``active()``."""
        return cls(policy, share_adapter=adapter)

    @property
    def decoder(self) -> nn.Module:
        return self.backbone if self._shared is None else self._decoder

    @property
    def shared(self) -> bool:
        return self._shared is not None

    def release(self) -> None:
        """Remove this critic's adapter from the policy it shares (before a fresh critic replaces it)."""
        if self._shared is not None:
            policy, adapter = self._shared
            policy.delete_adapter(adapter)
            self._shared = None

    @contextmanager
    def active(self) -> Iterator[None]:
        """The critic's adapter as the shared base's active one. The forward and the backward pass of a
        value loss must both run inside: gradient checkpointing recomputes each layer's forward in the
        backward pass, and a layer recomputed with the policy's adapter would hand the critic the
        policy's activations. Re-entrant; a no-op for a critic with its own decoder."""
        if self._shared is None:
            yield
            return
        policy, adapter = self._shared
        layers = _lora_layers(policy)
        previous = [layer._active_adapter for layer in layers]
        # Switch the layers' active adapter without peft's set_adapter, which would also freeze the other.
        for layer in layers:
            layer._active_adapter = [adapter]
        try:
            yield
        finally:
            for layer, was in zip(layers, previous):
                layer._active_adapter = was

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        with self.active():
            out = self.decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
        hidden = out.last_hidden_state
        return self.value_head(hidden)

    def token_values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Values aligned with the predicted tokens: position t is V(state before token t+1) → [B, T−1]."""
        return self.forward(input_ids, attention_mask)[:, :-1]


def _add_adapter(policy: Any, adapter: str) -> list[nn.Parameter]:
    if not hasattr(policy, "peft_config") or not hasattr(policy, "add_adapter"):
        raise TypeError("a critic can share only a LoRA (peft) policy's base: set ModelSpec.lora_rank > 0")
    if adapter in policy.peft_config:
        raise ValueError(f"the policy already has an adapter named {adapter!r}")
    active = policy.active_adapter
    policy.add_adapter(adapter, policy.peft_config[active])
    policy.base_model.set_adapter(active)  # the policy's adapter stays active and trainable
    own = dict(policy.named_parameters())
    weights = []
    with torch.no_grad():
        for name, p in own.items():
            if f".{adapter}." in name:
                p.copy_(own[name.replace(f".{adapter}.", f".{active}.")])
                p.requires_grad_(True)
                weights.append(p)
    return weights


def _lora_layers(model: nn.Module) -> list[Any]:
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]
