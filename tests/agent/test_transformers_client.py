import pytest

from agent.llm import TransformersChatClient, build_byte_tokenizer


@pytest.fixture(scope="module")
def tiny_client():
    from transformers import LlamaConfig

    tokenizer = build_byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    return TransformersChatClient.from_config(config, tokenizer, seed=0, ignore_eos=True)


def test_byte_tokenizer_round_trips_text_offline():
    tokenizer = build_byte_tokenizer()
    text = "class ModelNew(nn.Module):\n    x = 1  # ünïcode\r\n"

    ids = tokenizer(text, add_special_tokens=False)["input_ids"]

    assert tokenizer.decode(ids) == text
    assert len(ids) == len(text.encode("utf-8"))


def test_tiny_random_model_generates_tokens_and_exposes_ids(tiny_client, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    messages = [{"role": "system", "content": "be fast"}, {"role": "user", "content": "write a kernel"}]

    completion = tiny_client.complete(messages, max_tokens=16, temperature=0.0)

    assert completion.completion_tokens == len(completion.completion_token_ids) == 16
    assert completion.prompt_token_ids == tiny_client.encode_messages(messages)
    assert completion.prompt_tokens == len(completion.prompt_token_ids)
    assert completion.finish_reason == "length"
    assert (
        tiny_client.tokenizer.decode(completion.completion_token_ids, skip_special_tokens=True)
        == completion.text
    )


def test_greedy_generation_is_deterministic_token_in_token_out(tiny_client):
    prompt_ids = tiny_client.encode_messages([{"role": "user", "content": "hi"}])

    first = tiny_client.generate_ids(prompt_ids, max_tokens=8, temperature=0.0)
    second = tiny_client.generate_ids(prompt_ids, max_tokens=8, temperature=0.0)

    assert first == second
    assert len(first) == 8
    assert all(0 <= t < len(tiny_client.tokenizer) for t in first)


def test_chat_template_renders_roles_in_order(tiny_client):
    ids = tiny_client.encode_messages([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])

    assert tiny_client.tokenizer.decode(ids) == "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n"


def test_finish_reason_is_stop_exactly_when_generation_ends_with_eos():
    from transformers import LlamaConfig

    tokenizer = build_byte_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
    )
    client = TransformersChatClient.from_config(config, tokenizer, seed=0)

    completion = client.complete([{"role": "user", "content": "hi"}], max_tokens=32, temperature=0.0)

    ended_with_eos = completion.completion_token_ids[-1] == tokenizer.eos_token_id
    assert completion.finish_reason == ("stop" if ended_with_eos else "length")
    assert ended_with_eos or len(completion.completion_token_ids) == 32
