"""A real local Hugging Face model directory, built here: a BPE tokenizer trained on a few strings, with
a chat template and special tokens, wrapped as a ``PreTrainedTokenizerFast``, and a small random causal
LM (Qwen2 or Llama) written with ``save_pretrained``. ``ModelSpec(kind="pretrained", name_or_path=DIR)``
loads it exactly as it would load a downloaded model."""

from pathlib import Path

import pytest

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "Write a CUDA kernel for the model below. Return the whole file in one python block.",
    "import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        return x",
    "You are an expert in GPU kernels. compile verify profile submit",
    "ACTION: compile\nThe kernel compiled. It is 1.3x faster than eager PyTorch.",
    "system user assistant observation torch.sigmoid(x) * x",
]


def build_tokenizer(vocab_size: int = 300):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    core.train_from_iterator(CORPUS, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_hf_model_dir(directory: Path, arch: str = "qwen2", *, hidden: int = 32, layers: int = 2,
                       heads: int = 4, kv_heads: int = 2, seed: int = 0) -> Path:
    """Write a tokenizer and a random ``arch`` (``qwen2`` | ``llama``) causal LM into ``directory``."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    tok = build_tokenizer()
    cls = {"qwen2": Qwen2Config, "llama": LlamaConfig}[arch]
    config = cls(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                 num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                 max_position_embeddings=256,
                 tie_word_embeddings=False, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                 bos_token_id=None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def hf_model_dir(tmp_path_factory) -> Path:
    """A local Qwen2-architecture model directory (random weights, trained tokenizer with a chat template)."""
    return build_hf_model_dir(tmp_path_factory.mktemp("hf_qwen2"), "qwen2")


@pytest.fixture(scope="session")
def hf_llama_dir(tmp_path_factory) -> Path:
    return build_hf_model_dir(tmp_path_factory.mktemp("hf_llama"), "llama")
