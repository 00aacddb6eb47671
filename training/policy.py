"""Policies and tokenizers: a tiny causal LM built from a config (no download), or a pretrained one.

Generation is token in, token out: callers hand over token ids and get the sampled ids back, so a
multi-turn rollout is a concatenation of ids that is never re-templated.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from training.losses import chunked_head_logprobs

SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")


class Tokenizer(Protocol):
    vocab_size: int
    pad_token_id: int
    eos_token_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def prompt_ids(self, system: str, user: str) -> list[int]: ...

    def observation_ids(self, text: str) -> list[int]: ...


class ByteTokenizer:
    """UTF-8 bytes (ids 0–255) plus a few role markers; enough for tiny models and tests.

    Prompt: ``<bos><|system|>…<|user|>…<|assistant|>``; an observation appended after an
    assistant turn: ``<|observation|>…<|assistant|>``. The assistant ends its turn with ``<eos>``.
    """

    def __init__(self) -> None:
        self.special = {name: 256 + i for i, name in enumerate(SPECIAL_TOKENS)}
        self.vocab_size = 256 + len(SPECIAL_TOKENS)
        self.pad_token_id = self.special["<pad>"]
        self.bos_token_id = self.special["<bos>"]
        self.eos_token_id = self.special["<eos>"]

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def prompt_ids(self, system: str, user: str) -> list[int]:
        s = self.special
        out = [s["<bos>"]]
        if system:
            out += [s["<|system|>"], *self.encode(system)]
        return out + [s["<|user|>"], *self.encode(user), s["<|assistant|>"]]

    def observation_ids(self, text: str) -> list[int]:
        s = self.special
        return [s["<|observation|>"], *self.encode(text), s["<|assistant|>"]]


class HFTokenizer:
    """A transformers tokenizer with a chat template. Observations are rendered once, as a user
    message with the generation prompt, and appended to the ids so far (earlier turns untouched).
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.vocab_size = len(tokenizer)
        self.eos_token_id = int(tokenizer.eos_token_id)
        self.pad_token_id = int(tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_id)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=True)

    def prompt_ids(self, system: str, user: str) -> list[int]:
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": user})
        return chat_template_ids(self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))

    def observation_ids(self, text: str) -> list[int]:
        rendered = self.tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        if self.tok.bos_token and rendered.startswith(self.tok.bos_token):
            rendered = rendered[len(self.tok.bos_token):]
        return self.encode("\n" + rendered)


def chat_template_ids(rendered: Any) -> list[int]:
    """The token ids out of ``apply_chat_template(..., tokenize=True)``: a list of ids on transformers 4.x,
    a ``BatchEncoding`` (a mapping with ``input_ids``) on 5.x; a batch of one is unwrapped."""
    if isinstance(rendered, Mapping) or hasattr(rendered, "keys"):
        rendered = rendered["input_ids"]
    if isinstance(rendered, torch.Tensor):
        rendered = rendered.tolist()
    ids = list(rendered)
    if ids and isinstance(ids[0], (list, tuple)):
        if len(ids) != 1:
            raise ValueError(f"expected one tokenized conversation, got {len(ids)}")
        ids = list(ids[0])
    if not all(isinstance(i, int) for i in ids):
        raise TypeError(f"chat template did not give token ids: {type(ids[0]).__name__} items")
    return ids


@dataclass
class ModelSpec:
    """What to build. ``kind``: ``tiny_llama`` | ``tiny_gpt2`` (random init from a config) or
    ``pretrained`` (``name_or_path``: a hub name or any local Hugging Face directory, through
    ``AutoModelForCausalLM`` / ``AutoTokenizer``).

    ``dtype`` is the dtype the weights are stored and run in (``bfloat16`` on a GPU); the trainer keeps
    fp32 master copies of the trainable ones. ``lora_rank > 0`` trains LoRA adapters (``peft``) on
    ``lora_target_modules`` of a frozen base; ``gradient_checkpointing`` recomputes each layer's
    activations in the backward pass; ``attn_implementation`` is passed to transformers (``sdpa``,
    ``flash_attention_2``…; empty: its default)."""

    kind: str = "tiny_llama"
    name_or_path: str = ""
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    max_positions: int = 512
    dtype: str = "float32"
    gradient_checkpointing: bool = False
    lora_rank: int = 0
    lora_alpha: float = 32.0
    lora_dropout: float = 0.0
    lora_target_modules: str | list[str] = "all-linear"
    attn_implementation: str = ""

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise ValueError(f"model dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.lora_rank < 0:
            raise ValueError("lora_rank must be ≥ 0 (0: train every weight)")


def build_tokenizer(spec: ModelSpec) -> Tokenizer:
    if spec.kind == "pretrained":
        from transformers import AutoTokenizer

        return HFTokenizer(AutoTokenizer.from_pretrained(spec.name_or_path))
    return ByteTokenizer()


def build_model(spec: ModelSpec, tokenizer: Tokenizer, *, seed: int) -> nn.Module:
    """A causal LM (LoRA-wrapped when ``spec.lora_rank > 0``); tiny kinds are initialised
    deterministically from ``seed``, LoRA adapters too."""
    dtype = getattr(torch, spec.dtype)
    from transformers import AutoModelForCausalLM

    extra = {"attn_implementation": spec.attn_implementation} if spec.attn_implementation else {}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if spec.kind == "pretrained":
            model = AutoModelForCausalLM.from_pretrained(spec.name_or_path, **{_DTYPE_KWARG: dtype}, **extra)
        else:
            model = AutoModelForCausalLM.from_config(_tiny_config(spec, tokenizer), **extra).to(dtype)
        return prepare_for_training(model, spec)


def _dtype_kwarg() -> str:
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"  # renamed in 4.56; 5.x drops the old name


_DTYPE_KWARG = _dtype_kwarg()


def _tiny_config(spec: ModelSpec, tokenizer: Tokenizer) -> Any:
    if spec.kind == "tiny_llama":
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=spec.hidden_size,
            intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_heads,
            max_position_embeddings=spec.max_positions, tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            bos_token_id=getattr(tokenizer, "bos_token_id", None),
        )
    if spec.kind == "tiny_gpt2":
        from transformers import GPT2Config

        return GPT2Config(
            vocab_size=tokenizer.vocab_size, n_embd=spec.hidden_size, n_layer=spec.num_layers,
            n_head=spec.num_heads, n_positions=spec.max_positions,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )
    raise ValueError(f"unknown model kind {spec.kind!r}")


def prepare_for_training(model: nn.Module, spec: ModelSpec) -> nn.Module:
    """Gradient checkpointing and LoRA as ``spec`` asks; returns the model (a ``PeftModel`` under LoRA)."""
    if spec.gradient_checkpointing:
        # Non-reentrant checkpointing: works with frozen inputs (LoRA) and with keyword arguments.
        # Newer transformers call it activation checkpointing (the old name still works, with a warning).
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if spec.lora_rank > 0:
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError as exc:  # pragma: no cover - peft is a dependency; this names it if absent
            raise RuntimeError("LoRA needs the peft package (pip install peft)") from exc
        config = LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
                            target_modules=spec.lora_target_modules, task_type="CAUSAL_LM")
        model = get_peft_model(model, config)
    return model


def causal_lm_parts(model: nn.Module) -> tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor]]:
    """(decoder, head) of a transformers causal LM, LoRA-wrapped or not: ``decoder(input_ids=…,
    attention_mask=…).last_hidden_state`` is the final (normed) hidden state and ``head(hidden)`` gives
    the logits, so callers can apply the head a chunk of positions at a time."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = inner.base_model
    if decoder is inner:
        raise TypeError(f"{type(inner).__name__} is not a causal LM with a separate decoder and head")
    lm_head = inner.get_output_embeddings()
    # What some architectures' forward does to the head's output (Cohere, Granite, Gemma 2).
    cap = getattr(inner.config, "final_logit_softcapping", None)
    scale = getattr(inner.config, "logit_scale", None)
    divide = getattr(inner.config, "logits_scaling", None)

    def head(hidden: torch.Tensor) -> torch.Tensor:
        logits = lm_head(hidden)
        if scale is not None:
            logits = logits * scale
        if divide is not None:
            logits = logits / divide
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    return decoder, head


def sequence_logprobs(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, temperature: float = 1.0,
    positions: torch.Tensor | None = None, entropy: str = "none", chunk_tokens: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log π(input_ids[:, t+1] | ≤ t) → [B, T−1] fp32, and the entropy of π at t when asked.

    The LM head runs on ``chunk_tokens`` positions at a time and each chunk's logits are recomputed in
    the backward pass, so neither the [B, T, V] logits nor an fp32 copy of them exist at once.
    ``positions`` ([B, T−1], nonzero where wanted, e.g. the action mask) limits the head to those
    positions; the others read 0. ``entropy``: ``none``; ``detached`` (a value, no graph: for a metric);
    ``grad`` (differentiable: for an entropy bonus)."""
    decoder, head = causal_lm_parts(model)
    # use_cache=False: a scoring forward must not build a KV cache (generation still uses one)
    out = decoder(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
    hidden = out.last_hidden_state[:, :-1]
    targets = input_ids[:, 1:]
    select = (positions != 0) if positions is not None else torch.ones_like(targets, dtype=torch.bool)
    lp, ent = chunked_head_logprobs(hidden[select], head, targets[select], temperature=temperature,
                                    chunk_tokens=chunk_tokens, entropy=entropy)
    out_lp = hidden.new_zeros(targets.shape, dtype=torch.float32)
    out_lp[select] = lp
    out_ent = None
    if ent is not None:
        out_ent = hidden.new_zeros(targets.shape, dtype=torch.float32)
        out_ent[select] = ent
    return out_lp, out_ent


def _other_adapters(model: nn.Module) -> list[str]:
    """A peft model's adapters other than its active one (e.g. a critic's sharing the base); [] otherwise."""
    config = getattr(model, "peft_config", None)
    if not isinstance(config, Mapping):
        return []
    return [name for name in config if name != model.active_adapter]


def _of_adapters(key: str, adapters: Sequence[str]) -> bool:
    return any(f".{name}." in key for name in adapters)


def policy_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The policy's own weights: its state dict without the adapters of others sharing its base (a
    critic's), i.e. exactly the keys ``build_model`` of its spec has, wherever it is loaded."""
    others = _other_adapters(model)
    return {k: v for k, v in model.state_dict().items() if not _of_adapters(k, others)}


def load_policy_state_dict(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Load ``policy_state_dict`` output: every key of the policy must be there, the adapters of others
    sharing its base are left as they are."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    others = _other_adapters(model)
    missing = [k for k in missing if not _of_adapters(k, others)]
    if missing or unexpected:
        raise RuntimeError(f"policy state does not fit the model: missing {missing[:5]}, unexpected "
                           f"{list(unexpected)[:5]}")


class PolicyWeights:
    """The policy's own weights as a ``state_dict`` / ``load_state_dict`` object (for checkpoints)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def state_dict(self) -> dict[str, torch.Tensor]:
        return policy_state_dict(self.model)

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        load_policy_state_dict(self.model, state)


def frozen_copy(model: nn.Module) -> nn.Module:
    """A frozen copy of the policy as it samples (a peft model keeps its active adapter only)."""
    ref = copy.deepcopy(model)
    for name in _other_adapters(ref):
        ref.delete_adapter(name)
    ref.eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref


@dataclass
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64


class Generator(Protocol):
    """Anything that continues token sequences: a policy, or a scripted stand-in in tests."""

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[list[int]]: ...


class PolicyGenerator:
    """Samples from a transformers causal LM (left-padded batch, KV cache, ``generate``)."""

    def __init__(self, model: nn.Module, tokenizer: Tokenizer) -> None:
        self.model = model
        self.tokenizer = tokenizer

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[list[int]]:
        if not prompts:
            return []
        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attn = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            attn[i, width - len(p):] = 1
        was_training = self.model.training
        self.model.eval()
        try:
            out = self.model.generate(
                input_ids=ids.to(device), attention_mask=attn.to(device), do_sample=True,
                temperature=sampling.temperature, top_p=sampling.top_p, top_k=0,
                max_new_tokens=sampling.max_new_tokens, eos_token_id=self.tokenizer.eos_token_id,
                pad_token_id=pad,
            )
        finally:
            self.model.train(was_training)
        responses = []
        for row in out[:, width:].tolist():
            if self.tokenizer.eos_token_id in row:
                row = row[: row.index(self.tokenizer.eos_token_id) + 1]
            responses.append(row)
        return responses


class ScriptedGenerator:
    """Returns fixed responses (e.g. real kernels) while the trainer scores them with a real model.

    ``script(prompt_ids, call_index) -> str``; the text is encoded and ends with ``<eos>``.
    """

    def __init__(self, tokenizer: Tokenizer, script: Callable[[list[int], int], str]) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.calls = 0

    def generate(self, prompts: list[list[int]], sampling: Sampling) -> list[list[int]]:
        out = []
        for p in prompts:
            text = self.script(p, self.calls)
            self.calls += 1
            out.append(self.tokenizer.encode(text) + [self.tokenizer.eos_token_id])
        return out
