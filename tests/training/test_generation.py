"""Generation backends: the policy's own ``generate`` and an OpenAI-compatible server on loopback."""

import pytest
import torch
from completions_server import CompletionsServer

from training.generation import (
    GenerationRequest,
    OpenAICompletionsBackend,
    PolicyBackend,
    ServerError,
)
from training.policy import ByteTokenizer, ModelSpec, ScriptedGenerator, build_model


def greedy(model, prompt, n, eos):
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n,
                             eos_token_id=eos, pad_token_id=eos)
    return out[0, len(prompt):].tolist()


@pytest.fixture()
def served(tmp_path):
    tok = ByteTokenizer()
    model = build_model(ModelSpec(max_positions=128), tok, seed=0)
    model.save_pretrained(tmp_path / "initial")
    servers = []

    def start(ids_as="token_ids"):
        server = CompletionsServer(str(tmp_path / "initial"), tok.eos_token_id, ids_as=ids_as)
        servers.append(server)
        return server

    yield tok, model, start
    for server in servers:
        server.close()


def test_policy_backend_cuts_each_output_to_its_own_budget_and_end_of_turn():
    tok = ByteTokenizer()
    texts = ["abcdefghij", "xy"]
    backend = PolicyBackend(ScriptedGenerator(tok, lambda p, i: texts[i]), tok.eos_token_id)
    long, short = backend.generate([GenerationRequest([1], 4), GenerationRequest([2], 10)],
                                   temperature=1.0, top_p=1.0)
    assert (long.token_ids, long.finish_reason) == (tok.encode("abcd"), "length")
    assert (short.token_ids, short.finish_reason) == (tok.encode("xy") + [tok.eos_token_id], "stop")


@pytest.mark.parametrize("ids_as", ["token_ids", "logprob_tokens"])
def test_server_backend_returns_the_servers_token_ids_with_per_request_budgets(served, ids_as):
    # given: a vLLM-like server serving the policy's weights
    tok, model, start = served
    server = start(ids_as)
    backend = OpenAICompletionsBackend(server.url, "policy", eos_token_id=tok.eos_token_id)
    prompts = [tok.prompt_ids("", "Task a:"), tok.prompt_ids("", "Task bb:")]

    # when: two prompts are asked with different budgets, greedily
    outs = backend.generate([GenerationRequest(prompts[0], 5), GenerationRequest(prompts[1], 9)],
                            temperature=0.0, top_p=1.0)
    backend.close()

    # then: the ids are exactly the model's greedy continuation, each within its own budget
    assert [o.token_ids for o in outs] == [greedy(model, prompts[0], 5, tok.eos_token_id),
                                           greedy(model, prompts[1], 9, tok.eos_token_id)]
    assert [len(o.token_ids) for o in outs] == [5, 9] and [o.finish_reason for o in outs] == ["length"] * 2
    assert all(o.logprobs is not None and len(o.logprobs) == len(o.token_ids) for o in outs)
    assert all(lp <= 0.0 for o in outs for lp in o.logprobs)
    sent = sorted(server.requests, key=lambda b: b["max_tokens"])
    assert [(b["prompt"], b["max_tokens"]) for b in sent] == [(prompts[0], 5), (prompts[1], 9)]


def test_sync_weights_saves_the_policy_and_the_server_reloads_it(served, tmp_path):
    # given: a server on the initial weights, and a policy that has since changed
    tok, model, start = served
    server = start()
    backend = OpenAICompletionsBackend(server.url, "policy", eos_token_id=tok.eos_token_id,
                                       weights_dir=tmp_path / "sync")
    prompt = tok.prompt_ids("", "Task a:")
    before = backend.generate([GenerationRequest(prompt, 12)], temperature=0.0, top_p=1.0)[0].token_ids
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.5)
    changed = greedy(model, prompt, 12, tok.eos_token_id)
    assert changed != before

    # when: the trainer hands the weights over after step 3
    backend.sync_weights(model, 3)

    # then: the server loaded the saved directory and now samples the updated policy
    assert server.reloads == [str((tmp_path / "sync" / "step_000003").resolve())]
    assert (tmp_path / "sync" / "step_000003" / "config.json").exists()
    assert backend.generate([GenerationRequest(prompt, 12)], temperature=0.0, top_p=1.0)[0].token_ids == changed
    backend.close()


def test_a_server_without_token_ids_is_a_clear_error(served):
    tok, _, start = served
    server = start("none")
    backend = OpenAICompletionsBackend(server.url, "policy", eos_token_id=tok.eos_token_id)
    with pytest.raises(ServerError, match="carries no token ids"):
        backend.generate([GenerationRequest([1, 2, 3], 4)], temperature=0.0, top_p=1.0)
    backend.close()


def test_a_run_samples_from_the_server_and_hands_it_every_update(served, tmp_path):
    # given: the tiny GRPO recipe pointed at the server (which starts on the same seed-0 weights)
    from training.checkpoint import latest_checkpoint
    from training.metrics import ListSink
    from training.recipes import GenerationConfig, tiny_cpu_grpo
    from training.runner import run_training

    tok, _, start = served
    server = start()
    cfg = tiny_cpu_grpo()
    cfg.stages[0].steps = 2
    cfg.generation = GenerationConfig(kind="openai", base_url=server.url, model="policy",
                                      weights_dir=str(tmp_path / "weights"))

    # when: the run trains two steps
    run_training(cfg, out_dir=tmp_path / "run", sink=ListSink())

    # then: every rollout was generated by the server, which got the policy after each step
    assert len(server.requests) == 2 * cfg.data.tasks_per_step * cfg.algo.group_size
    assert server.reloads == [str((tmp_path / "weights" / f"step_{s:06d}").resolve()) for s in (1, 2)]
    final = torch.load(latest_checkpoint(tmp_path / "run") / "policy.pt")
    served_state = server.model.state_dict()
    assert [k for k in final if not torch.equal(final[k], served_state[k])] == []
