"""The ``pretrained`` path on a local Hugging Face directory the test builds (see conftest.py): the chat
template's ids on transformers 4.x and 5.x, loading, generation and an update step of a real Qwen2/Llama."""

import pytest
import torch

from training.policy import (
    HFTokenizer,
    ModelSpec,
    PolicyGenerator,
    Sampling,
    build_model,
    build_tokenizer,
    chat_template_ids,
)
from training.recipes import AlgoConfig, OptimConfig
from training.rollout import Rollout, Turn, TurnOutcome
from training.trainer import Trainer


def test_prompt_ids_are_the_chat_template_tokens(hf_model_dir):
    # given a tokenizer loaded from the directory (transformers 5 returns a BatchEncoding here)
    tok = build_tokenizer(ModelSpec(kind="pretrained", name_or_path=str(hf_model_dir)))
    assert isinstance(tok, HFTokenizer)
    # when
    ids = tok.prompt_ids("Be fast.", "Write a kernel")
    # then: plain ints, exactly the template rendered as text and tokenized
    rendered = tok.tok.apply_chat_template(
        [{"role": "system", "content": "Be fast."}, {"role": "user", "content": "Write a kernel"}],
        add_generation_prompt=True, tokenize=False)
    assert rendered == ("<|im_start|>system\nBe fast.<|im_end|>\n<|im_start|>user\nWrite a kernel<|im_end|>\n"
                        "<|im_start|>assistant\n")
    assert ids == tok.tok(rendered, add_special_tokens=False)["input_ids"]
    assert all(type(i) is int for i in ids)
    assert ids[0] == tok.tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.tok.decode(ids) == rendered


def test_chat_template_ids_accepts_the_4x_and_5x_return_types(hf_model_dir):
    tok = build_tokenizer(ModelSpec(kind="pretrained", name_or_path=str(hf_model_dir))).tok
    messages = [{"role": "user", "content": "compile verify"}]
    as_list = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    as_encoding = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                          return_dict=True)
    as_tensor = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                        return_dict=False, return_tensors="pt")
    assert isinstance(as_list, list) and not isinstance(as_list[0], list)  # the 4.x shape
    expected = list(as_list)
    assert chat_template_ids(as_list) == expected
    assert chat_template_ids(as_encoding) == expected
    assert chat_template_ids(as_tensor) == expected  # a [1, T] tensor
    with pytest.raises(ValueError, match="one tokenized conversation"):
        chat_template_ids([expected, expected])
    with pytest.raises(TypeError, match="token ids"):
        chat_template_ids(["<|im_start|>", "user"])


def test_observation_ids_continue_the_conversation(hf_model_dir):
    tok = build_tokenizer(ModelSpec(kind="pretrained", name_or_path=str(hf_model_dir)))
    ids = tok.observation_ids("ACTION: compile")
    assert tok.tok.decode(ids) == "\n<|im_start|>user\nACTION: compile<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("fixture", ["hf_model_dir", "hf_llama_dir"])
def test_a_local_directory_loads_generates_and_trains(fixture, request):
    # given the directory as a recipe names it, in bf16
    directory = request.getfixturevalue(fixture)
    spec = ModelSpec(kind="pretrained", name_or_path=str(directory), dtype="bfloat16")
    tok = build_tokenizer(spec)
    model = build_model(spec, tok, seed=0)
    assert next(model.parameters()).dtype == torch.bfloat16
    assert model.config.vocab_size == tok.vocab_size
    # when it samples a reply from a templated prompt
    prompt = tok.prompt_ids("", "Write a kernel")
    torch.manual_seed(0)
    [reply] = PolicyGenerator(model, tok).generate([prompt], Sampling(max_new_tokens=6))
    assert 1 <= len(reply) <= 6 and all(0 <= i < tok.vocab_size for i in reply)
    # and a GRPO step trains on two such rollouts with opposite rewards
    actions = [reply, tok.encode("return x") + [tok.eos_token_id]]
    rollouts = [Rollout(task_name="t", group=0, index=i, prompt_ids=prompt,
                        turns=[Turn(action_ids=a, text="", outcome=TurnOutcome(float(i), "ok"))])
                for i, a in enumerate(actions)]
    before = [p.detach().clone() for p in model.parameters()]
    trainer = Trainer(model, optim=OptimConfig(lr=1e-2), pad_id=tok.pad_token_id)
    stats = trainer.grpo_step(rollouts, AlgoConfig(group_size=2))
    # then the weights moved and stayed bf16
    assert stats["grad_norm"] > 0
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert sum(not torch.equal(a, b) for a, b in zip(before, model.parameters())) == len(before)
