"""training.export: the byte-level tiny models' tokenizer as a Hugging Face one, id for id."""

from __future__ import annotations

import pytest

from training.export import ExportError, byte_tokenizer_as_hf
from training.policy import ByteTokenizer


def test_the_hf_tokenizer_renders_a_conversation_with_the_byte_tokenizers_ids():
    # given the byte tokenizer and its Hugging Face counterpart
    byte = ByteTokenizer()
    hf = byte_tokenizer_as_hf(byte)
    # when a conversation of two turns is rendered by the chat template
    messages = [{"role": "system", "content": "be fast"}, {"role": "user", "content": "write a kernel: ünï"},
                {"role": "assistant", "content": "class ModelNew:\r\n\tpass"},
                {"role": "user", "content": "compiled; 1.5x"}]
    ids = hf.apply_chat_template(messages, tokenize=True, return_dict=False)
    # then it is the ids training laid out: bytes as themselves, every marker one token
    want = (byte.prompt_ids("be fast", "write a kernel: ünï") + byte.encode("class ModelNew:\r\n\tpass")
            + [byte.eos_token_id] + byte.observation_ids("compiled; 1.5x"))
    assert list(ids) == want
    assert len(hf) == byte.vocab_size
    assert (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (byte.bos_token_id, byte.eos_token_id,
                                                                    byte.pad_token_id)
    assert hf.decode(want, skip_special_tokens=True) == "be fastwrite a kernel: ünïclass ModelNew:\r\n\tpass" \
                                                        "compiled; 1.5x"


def test_every_byte_is_its_own_id_and_decodes_back():
    hf = byte_tokenizer_as_hf(ByteTokenizer())
    text = bytes(range(256)).decode("latin-1")
    ids = hf(text, add_special_tokens=False)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert hf.decode(ids) == text


def test_special_ids_with_a_gap_after_the_bytes_are_refused():
    byte = ByteTokenizer()
    byte.special = {**byte.special, "<|extra|>": byte.vocab_size + 1}
    with pytest.raises(ExportError, match="not contiguous"):
        byte_tokenizer_as_hf(byte)
