"""A checkpoint as a Hugging Face directory (what the agent, a vLLM server or the leaderboard load).

``export_checkpoint(run_dir, step, out)`` rebuilds the run's policy from its stored config, loads the
step's weights, merges LoRA adapters into the base weights when the policy has them (``peft``'s
``merge_and_unload``), and writes ``save_pretrained`` of the model and of its tokenizer: the
pretrained model's own tokenizer, or for the byte-level tiny models an equivalent Hugging Face
tokenizer (same ids, and a chat template that renders conversations exactly as training did).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from training import checkpoint as ckpt

# Renders a conversation as training.policy.ByteTokenizer lays it out: the first user message opens
# the prompt, later ones are observations, every reply ends with <eos> and is followed by the next
# observation, and each user/observation message ends with the <|assistant|> marker.
BYTE_CHAT_TEMPLATE = (
    "<bos>{% set ns = namespace(first=true) %}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{% if m['content'] %}<|system|>{{ m['content'] }}{% endif %}"
    "{% elif m['role'] == 'assistant' %}{{ m['content'] }}<eos>"
    "{% else %}{% if ns.first %}<|user|>{% set ns.first = false %}{% else %}<|observation|>{% endif %}"
    "{{ m['content'] }}<|assistant|>{% endif %}{% endfor %}"
)


EXPORT_INFO = "kernelcourt_checkpoint.json"  # which run, step and config the directory came from


class ExportError(ValueError):
    pass


def byte_tokenizer_as_hf(tokenizer: Any) -> Any:
    """A ``PreTrainedTokenizerFast`` with ``training.policy.ByteTokenizer``'s ids: byte b is id b,
    the role markers and specials follow from 256 in the same order."""
    from agent.llm import byte_level_tokenizer

    specials = sorted(tokenizer.special.items(), key=lambda item: item[1])
    if [i for _, i in specials] != list(range(256, 256 + len(specials))):
        raise ExportError("the byte tokenizer's special ids are not contiguous after the 256 bytes")
    return byte_level_tokenizer([name for name, _ in specials], chat_template=BYTE_CHAT_TEMPLATE,
                                bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")


def _hf_tokenizer(spec: Any, tokenizer: Any) -> Any:
    if spec.kind == "pretrained":
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(spec.name_or_path)
    if hasattr(tokenizer, "special"):
        return byte_tokenizer_as_hf(tokenizer)
    raise ExportError(f"no Hugging Face tokenizer for model kind {spec.kind!r}")


def export_checkpoint(run_dir: str | Path, step: int, out_dir: str | Path) -> Path:
    """Write step ``step`` of the run in ``run_dir`` to ``out_dir`` as a Hugging Face directory."""
    from training.policy import build_model, build_tokenizer
    from training.recipes import RunConfig

    path = ckpt.checkpoint_dir(Path(run_dir), step)
    if not (path / ckpt.STATE_FILE).exists():
        found = [p.name for p in ckpt.list_checkpoints(Path(run_dir))]
        raise ExportError(f"no checkpoint for step {step} in {run_dir} (found: {found or 'none'})")
    _, stored = ckpt.load_checkpoint(path)
    config = RunConfig.from_dict(stored)
    tokenizer = build_tokenizer(config.model)
    model = build_model(config.model, tokenizer, seed=config.seed)
    ckpt.load_into(path, "policy", model)
    if hasattr(model, "merge_and_unload"):  # a peft model: fold the adapters into the weights
        model = model.merge_and_unload()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    hf_tokenizer = _hf_tokenizer(config.model, tokenizer)
    hf_tokenizer.save_pretrained(out)
    origin = {"run_dir": str(Path(run_dir).resolve()), "step": step, "config_hash": config.config_hash()}
    (out / EXPORT_INFO).write_text(json.dumps(origin) + "\n", encoding="utf-8")
    return out
