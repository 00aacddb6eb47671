"""Full rollouts: a real HTTP server speaking the chat-completions API drives the loop, and the real
evaluator (gpu_workers.evaluate, sandboxed subprocesses on the CPU) judges every candidate."""

import json
from pathlib import Path

import pytest
from scripted_llm import error, kernel_reply, reply

from agent.events import ListSink
from agent.llm import OpenAIChatClient
from agent.loop import RolloutConfig, run_rollout
from agent.prompts import Variant

KERNELS = Path(__file__).resolve().parent / "kernels"
TORCH_KERNEL = (KERNELS / "torch_relu_add.py").read_text()
WRONG_KERNEL = (KERNELS / "wrong_relu_add.py").read_text()
SYNTAX_ERROR_KERNEL = """import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y)
        return x + y
"""
NO_CANDIDATE = "I will think about vectorising the loop first."


def _client(server, **kwargs):
    return OpenAIChatClient(server.url, "scripted", **{"max_retries": 2, "backoff_s": 0.01, **kwargs})


def _config(**overrides):
    return RolloutConfig.for_evaluation(
        **{
            "trials": 2,
            "track": "open",
            "task_name": "relu_add",
            "baselines": ("eager",),
            "target_speedup": None,
            **overrides,
        }
    )


def _check_seq(sink, rollout_id):
    assert [e.seq for e in sink.events] == list(range(len(sink.events)))
    assert {e.rollout_id for e in sink.events} == {rollout_id}


def test_text_protocol_rollout_recovers_from_malformed_and_broken_kernels_then_succeeds(
    openai_server, relu_task
):
    server = openai_server(
        [
            reply(NO_CANDIDATE, reasoning="thinking out loud"),
            reply(kernel_reply(SYNTAX_ERROR_KERNEL, action="compile")),
            reply(kernel_reply(TORCH_KERNEL), prompt_tokens=300, completion_tokens=50),
            reply("never asked"),
        ]
    )
    sink = ListSink()

    summary = run_rollout(relu_task, _client(server), config=_config(), sink=sink, rollout_id="r-text")

    assert summary.stop_reason == "success"
    assert (summary.turns, summary.evaluations) == (3, 2)
    assert (summary.prompt_tokens, summary.completion_tokens, summary.total_tokens) == (500, 90, 590)
    assert summary.passed is True
    assert summary.best_kernel == TORCH_KERNEL
    assert summary.best_turn == 3
    assert summary.best_evaluation["status"] == "passed"
    assert summary.best_reward == summary.best_evaluation["reward"] > 0
    assert [(c["turn"], c["tool"], c["status"]) for c in summary.candidates] == [
        (2, "compile", "compile_error"),
        (3, "submit", "passed"),
    ]
    assert len(server.requests) == 3
    _check_seq(sink, "r-text")
    assert sink.kinds() == [
        "system",
        "user",
        "assistant",
        "observation",
        "assistant",
        "tool_call",
        "evaluation",
        "observation",
        "assistant",
        "tool_call",
        "evaluation",
        "observation",
        "summary",
    ]
    first_obs, compile_obs, submit_obs = sink.of_kind("observation")
    assert first_obs.content.startswith("No candidate found")
    assert first_obs.data == {"protocol_error": True}
    assert (first_obs.role, first_obs.tool_call) == ("user", None)
    assert compile_obs.content.startswith("compile: FAILED\nthe kernel file is not valid Python: line 8")
    assert submit_obs.content.startswith("submission: ACCEPTED\nreward: ")
    evaluations = sink.of_kind("evaluation")
    assert [e.evaluation["status"] for e in evaluations] == ["compile_error", "passed"]
    assert evaluations[1].data["kernel_source"] == TORCH_KERNEL
    assert evaluations[1].data["accepted"] is True
    assert evaluations[1].reward == summary.best_reward
    assert sink.events[-1].data["stop_reason"] == "success"
    assert summary.last_seq == sink.events[-1].seq == 12
    assert sink.of_kind("assistant")[0].data["reasoning"] == "thinking out loud"
    assert all("thinking out loud" not in json.dumps(r["messages"]) for r in server.requests)
    # the model saw each observation in the next request, in a user turn after its own reply
    second, third = server.requests[1]["messages"], server.requests[2]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[-1]["content"] == first_obs.content
    assert third[-1]["content"] == compile_obs.content
    assert "ACTION: verify" in second[0]["content"]
    assert "```python\n" + relu_task.rstrip() + "\n```" in second[1]["content"]


TORCH_SILU_KERNEL = """import torch.nn as nn
import torch.nn.functional as F


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.silu(x)
"""


@pytest.mark.slow
def test_native_tool_calls_on_a_suite_task_strict_track_reject_library_compute_and_accept_a_cpp_kernel(
    openai_server,
):
    from gpu_workers.suite import get_task

    task = get_task("silu")
    cpp_kernel = task.cpu_kernel_source  # the suite's honest C++ kernel (its build is cached by source)
    server = openai_server(
        [
            reply(
                tool_calls=[
                    {
                        "id": "call_a",
                        "name": "verify",
                        "arguments": json.dumps({"source": TORCH_SILU_KERNEL}),
                    },
                    {"id": "call_b", "name": "profile", "arguments": '{"source": "class ModelNew(nn.Module'},
                ]
            ),
            reply(
                "Now a real kernel.",
                tool_calls=[
                    {"id": "call_c", "name": "profile", "arguments": json.dumps({"source": cpp_kernel})},
                    {"id": "call_d", "name": "submit", "arguments": json.dumps({"source": cpp_kernel})},
                ],
            ),
        ]
    )
    sink = ListSink()

    summary = run_rollout(
        task.task_source,
        _client(server),
        config=_config(track="strict", use_tools=True, task_name=task.name),
        sink=sink,
    )

    assert summary.stop_reason == "success"
    assert (summary.turns, summary.evaluations) == (2, 2)  # profile and submit of one source: one evaluation
    assert summary.best_kernel == cpp_kernel
    assert summary.best_evaluation["status"] == "passed"
    assert summary.best_evaluation["findings"] == []
    assert summary.best_evaluation["rule_set"]["name"] == "strict"
    assert summary.best_speedup == summary.best_evaluation["speedup"]["eager"] > 0
    assert [(c["tool"], c["status"]) for c in summary.candidates] == [
        ("verify", "rejected"),
        ("profile", "passed"),
        ("submit", "passed"),
    ]
    evaluations = sink.of_kind("evaluation")
    # the dispatch trace of forward and the watch over every forward call each saw aten::silu
    assert [r["rule"] for r in evaluations[0].evaluation["findings"]] == ["library_compute", "library_compute"]
    assert [e.data["cached"] for e in evaluations] == [False, False, True]
    observations = sink.of_kind("observation")
    assert [(o.role, o.tool_call["id"]) for o in observations] == [
        ("tool", "call_b"),
        ("tool", "call_a"),
        ("tool", "call_c"),
        ("tool", "call_d"),
    ]
    assert observations[0].content.startswith("The arguments of `profile` are not valid JSON")
    assert "[reject] library_compute" in observations[1].content
    assert observations[2].content.startswith("timings: kernel ")
    assert observations[3].content.startswith("submission: ACCEPTED\nreward: ")
    # the endpoint got the tools and the task's name, and every tool call was answered by id
    assert "`silu`" in server.requests[0]["messages"][1]["content"]
    assert [t["function"]["name"] for t in server.requests[0]["tools"]] == [
        "compile",
        "verify",
        "profile",
        "submit",
    ]
    follow_up = server.requests[1]["messages"]
    assert [m["role"] for m in follow_up] == ["system", "user", "assistant", "tool", "tool"]
    assert [c["id"] for c in follow_up[2]["tool_calls"]] == ["call_a", "call_b"]
    assert [m["tool_call_id"] for m in follow_up[3:]] == ["call_a", "call_b"]


def test_retries_and_a_slow_reply_do_not_break_the_rollout(openai_server, relu_task):
    server = openai_server(
        [
            error(500),
            reply(kernel_reply(TORCH_KERNEL), delay=2.0),
            reply(kernel_reply(TORCH_KERNEL)),
        ]
    )
    client = _client(server, timeout_s=0.5, max_retries=3)

    summary = run_rollout(relu_task, client, config=_config(), sink=ListSink())

    assert summary.stop_reason == "success"
    assert summary.turns == 1
    assert client.attempts == 3
    assert summary.prompt_tokens == 100  # only the completion that arrived counts


def test_target_speedup_keeps_going_after_a_passing_submit_and_reuses_evaluations(openai_server, relu_task):
    server = openai_server(
        [
            reply(kernel_reply(WRONG_KERNEL, action="verify")),
            reply(kernel_reply(TORCH_KERNEL)),
            reply(kernel_reply(TORCH_KERNEL, note="Same again.")),
        ]
    )
    sink = ListSink()

    summary = run_rollout(
        relu_task, _client(server), config=_config(target_speedup=1000.0, target_baseline="eager", max_turns=3), sink=sink
    )

    assert summary.stop_reason == "max_turns"
    assert (summary.turns, summary.evaluations) == (3, 2)
    assert summary.best_kernel == TORCH_KERNEL
    observations = sink.of_kind("observation")
    assert observations[0].content.startswith("status: incorrect\ncorrect: false\n")
    assert observations[1].content.startswith("Correct, but the speedup over eager (")
    assert "is below the target 1e+03x; keep optimising.\nsubmission: ACCEPTED" in observations[1].content
    assert [e.data["accepted"] for e in sink.of_kind("evaluation")] == [False, False, False]


def test_turn_limit_and_no_progress_stop_without_evaluations(openai_server, relu_task):
    limited = openai_server([reply(NO_CANDIDATE)] * 5)
    stuck = openai_server([reply(NO_CANDIDATE)] * 5)

    by_turns = run_rollout(relu_task, _client(limited), config=_config(max_turns=2), sink=ListSink())
    by_streak = run_rollout(
        relu_task, _client(stuck), config=_config(max_consecutive_invalid=3), sink=ListSink()
    )

    assert (by_turns.stop_reason, by_turns.turns, by_turns.evaluations) == ("max_turns", 2, 0)
    assert (by_streak.stop_reason, by_streak.turns, by_streak.evaluations) == ("no_progress", 3, 0)
    assert by_turns.best_kernel is None and by_turns.best_evaluation is None


def test_token_budget_stops_before_the_turn_that_would_exceed_it(openai_server, relu_task):
    server = openai_server([reply(NO_CANDIDATE, prompt_tokens=100, completion_tokens=20)] * 5)

    summary = run_rollout(relu_task, _client(server), config=_config(max_total_tokens=250), sink=ListSink())

    assert (summary.stop_reason, summary.turns, summary.total_tokens) == ("token_budget", 3, 360)
    assert len(server.requests) == 3


def test_wall_clock_budget_and_cancel_hook(openai_server, relu_task):
    slow = openai_server([reply(NO_CANDIDATE, delay=0.4)] * 5)
    cancellable = openai_server([reply(NO_CANDIDATE)] * 5)
    polls = []

    def cancel():
        polls.append(1)
        return len(polls) > 2

    timed = run_rollout(relu_task, _client(slow), config=_config(max_wall_s=0.3), sink=ListSink())
    sink = ListSink()
    cancelled = run_rollout(relu_task, _client(cancellable), config=_config(), sink=sink, cancel=cancel)

    assert (timed.stop_reason, timed.turns) == ("wall_clock", 1)
    assert (cancelled.stop_reason, cancelled.turns) == ("cancelled", 2)
    assert sink.events[-1].kind == "summary"
    assert sink.events[-1].data["stop_reason"] == "cancelled"


def test_endpoint_client_error_ends_the_rollout_with_an_error_event(openai_server, relu_task):
    server = openai_server([error(401, '{"error": "invalid api key"}')])
    sink = ListSink()

    summary = run_rollout(relu_task, _client(server), config=_config(), sink=sink)

    assert summary.stop_reason == "llm_error"
    assert summary.turns == 0
    assert summary.error.startswith("LLMHTTPError: ")
    assert "HTTP 401" in summary.error
    assert sink.kinds() == ["system", "user", "error", "summary"]


def test_contrastive_variants_go_into_the_task_prompt(openai_server, relu_task):
    server = openai_server([reply(NO_CANDIDATE)])
    variants = [
        Variant("SLOW_SOURCE = 1", 0.6),
        Variant("FAST_SOURCE = 1", 2.4),
        Variant("BROKEN = 1", None, "incorrect"),
    ]

    run_rollout(
        relu_task,
        _client(server),
        config=_config(max_turns=1, contrastive_variants=variants, contrastive_k=2),
        sink=ListSink(),
    )

    task_message = server.requests[0]["messages"][1]["content"]
    assert "### Variant 1: speedup 0.60x\n```python\nSLOW_SOURCE = 1\n```" in task_message
    assert "### Variant 2: speedup 2.40x\n```python\nFAST_SOURCE = 1\n```" in task_message
    assert "BROKEN" not in task_message
    assert "explain why the faster ones are faster" in task_message


def test_config_round_trips_and_presets():
    config = RolloutConfig.for_training(
        contrastive_variants=[Variant("x", 1.5)], baselines=["eager"], target_speedup=None
    )

    assert RolloutConfig.for_evaluation().max_turns == 200
    assert config.max_turns == 150
    assert RolloutConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(ValueError, match="unknown RolloutConfig fields"):
        RolloutConfig.from_dict({"max_turnz": 3})
    with pytest.raises(ValueError, match="target_baseline 'compile' is not measured"):
        RolloutConfig(baselines=("eager",))


def test_transformers_client_drives_a_rollout_and_records_token_ids(relu_task):
    from transformers import LlamaConfig

    from agent.llm import TransformersChatClient, build_byte_tokenizer

    tokenizer = build_byte_tokenizer()
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
    )
    client = TransformersChatClient.from_config(model_config, tokenizer, seed=0, ignore_eos=True)
    sink = ListSink()
    config = RolloutConfig.for_training(
        max_turns=2, max_completion_tokens=8, context_tokens=6000, track="open"
    )

    summary = run_rollout(relu_task, client, config=config, sink=sink)

    assert (summary.stop_reason, summary.turns, summary.evaluations) == ("max_turns", 2, 0)
    assert summary.completion_tokens == 16
    assistant = sink.of_kind("assistant")
    assert [len(e.data["completion_token_ids"]) for e in assistant] == [8, 8]
    assert assistant[0].prompt_tokens == len(assistant[0].data["prompt_token_ids"])
    assert assistant[1].prompt_tokens > assistant[0].prompt_tokens  # the observation went back in


def test_an_evaluator_failure_costs_one_action_not_the_rollout(openai_server, relu_task):
    def broken_evaluator(request):
        raise OSError("no space left on device")

    server = openai_server([reply(kernel_reply(TORCH_KERNEL))] * 2)
    sink = ListSink()

    summary = run_rollout(
        relu_task, _client(server), config=_config(max_turns=2), sink=sink, evaluate_fn=broken_evaluator
    )

    assert (summary.stop_reason, summary.turns, summary.evaluations) == ("max_turns", 2, 2)
    assert summary.best_kernel is None
    observations = sink.of_kind("observation")
    assert [o.content for o in observations] == [
        "evaluator error (not your kernel's fault, try again): OSError: no space left on device"
    ] * 2
    assert [e.data["evaluator_error"] for e in sink.of_kind("evaluation")] == [
        "OSError: no space left on device"
    ] * 2


def test_wall_clock_budget_is_checked_again_before_each_evaluation(openai_server, relu_task):
    server = openai_server([reply(kernel_reply(TORCH_KERNEL), delay=0.4)])
    sink = ListSink()

    summary = run_rollout(relu_task, _client(server), config=_config(max_wall_s=0.3), sink=sink)

    assert (summary.stop_reason, summary.turns, summary.evaluations) == ("wall_clock", 1, 0)
    assert sink.kinds() == ["system", "user", "assistant", "summary"]


def test_defaults_measure_torch_compile_and_keep_going_until_5_percent_over_it(openai_server, relu_task):
    # given: three passing submissions, 2.0x / 1.02x / 1.10x over torch.compile (all faster than eager)
    from gpu_workers.schema import EvalResult

    speedups = {"a": 1.02, "b": 1.10}
    requests = []

    def evaluator(request):
        requests.append(request)
        tag = "b" if "VARIANT_B" in request.kernel_source else "a"
        return EvalResult(status="passed", correct=True, reward=2.0,
                          speedup={"eager": 2.0, "compile": speedups[tag]},
                          timings_ms={"kernel": 1.0, "eager": 2.0, "compile": 1.0 * speedups[tag]})

    server = openai_server(
        [
            reply(kernel_reply(TORCH_KERNEL)),
            reply(kernel_reply(TORCH_KERNEL + "\nVARIANT_B = 1\n")),
            reply(kernel_reply(TORCH_KERNEL + "\nVARIANT_C = 1\n")),
        ]
    )
    config = RolloutConfig.for_evaluation(trials=2, track="open", task_name="relu_add", max_turns=3)
    sink = ListSink()

    # when: the loop runs with the agent's default settings
    summary = run_rollout(relu_task, _client(server), config=config, sink=sink, evaluate_fn=evaluator)

    # then: both baselines were asked for, the 1.02x kernel was not accepted, the 1.10x one was
    assert config.baselines == ("eager", "compile") and config.target_speedup == 1.05
    assert [r.baselines for r in requests] == [("eager", "compile")] * 2
    assert summary.stop_reason == "success" and summary.turns == 2
    assert [e.data["accepted"] for e in sink.of_kind("evaluation")] == [False, True]
    first = sink.of_kind("observation")[0].content
    assert first.startswith("Correct, but the speedup over compile (1.02x) is below the target 1.05x")
