"""Policies and tokenizers: a tiny causal LM built from a config (no download), or a pretrained one.

Generation is token in, token out: callers hand over token ids and get the sampled ids back, so a
multi-turn rollout is a concatenation of ids that is never re-templated.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

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
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        return list(self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))

    def observation_ids(self, text: str) -> list[int]:
        rendered = self.tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        if self.tok.bos_token and rendered.startswith(self.tok.bos_token):
            rendered = rendered[len(self.tok.bos_token):]
        return self.encode("\n" + rendered)


@dataclass
class ModelSpec:
    """What to build. ``kind``: ``tiny_llama`` | ``tiny_gpt2`` (random init from a config) or
    ``pretrained`` (``name_or_path`` through ``AutoModelForCausalLM``, e.g. on a GPU node)."""

    kind: str = "tiny_llama"
    name_or_path: str = ""
    hidden_size: int = 64
    intermediate_size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    max_positions: int = 512
    dtype: str = "float32"


def build_tokenizer(spec: ModelSpec) -> Tokenizer:
    if spec.kind == "pretrained":
        from transformers import AutoTokenizer

        return HFTokenizer(AutoTokenizer.from_pretrained(spec.name_or_path))
    return ByteTokenizer()


def build_model(spec: ModelSpec, tokenizer: Tokenizer, *, seed: int) -> nn.Module:
    """A causal LM; tiny kinds are initialised deterministically from ``seed``."""
    dtype = getattr(torch, spec.dtype)
    if spec.kind == "pretrained":
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(spec.name_or_path, torch_dtype=dtype)
    from transformers import AutoModelForCausalLM

    if spec.kind == "tiny_llama":
        from transformers import LlamaConfig

        config: Any = LlamaConfig(
            vocab_size=tokenizer.vocab_size, hidden_size=spec.hidden_size,
            intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads, num_key_value_heads=spec.num_heads,
            max_position_embeddings=spec.max_positions, tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
            bos_token_id=getattr(tokenizer, "bos_token_id", None),
        )
    elif spec.kind == "tiny_gpt2":
        from transformers import GPT2Config

        config = GPT2Config(
            vocab_size=tokenizer.vocab_size, n_embd=spec.hidden_size, n_layer=spec.num_layers,
            n_head=spec.num_heads, n_positions=spec.max_positions,
            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        )
    else:
        raise ValueError(f"unknown model kind {spec.kind!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    return model.to(dtype)


def frozen_copy(model: nn.Module) -> nn.Module:
    ref = copy.deepcopy(model)
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
