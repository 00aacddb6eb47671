from agent.context import CandidateRecord, ContextPolicy, TurnRecord, approx_tokens, messages_tokens


def _kernel(i: int) -> str:
    body = "\n".join(f"    y{j} = x * {i} + {j}  # unrolled step" for j in range(60))
    return f"import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n{body}\n        return y0\n"


def _turn(i: int) -> TurnRecord:
    source = _kernel(i)
    passed = i % 3 == 0
    speed = 1.0 + i / 100 if passed else None
    reasoning = f"Turn {i} reasoning. " + "Let me think about tiling and vectorisation at length. " * 40
    observation = f"status: {'passed' if passed else 'incorrect'}\n" + "trial detail line\n" * 30
    return TurnRecord(
        index=i,
        assistant={"role": "assistant", "content": reasoning + f"\n```python\n{source}```"},
        observations=[{"role": "user", "content": observation}],
        candidates=[
            CandidateRecord(
                turn=i,
                tool="submit",
                source=source,
                kernel_hash=f"{i:064x}",
                status="passed" if passed else "incorrect",
                correct=passed,
                reward=speed or 0.0,
                speedup=speed,
            )
        ],
    )


def test_short_conversation_is_kept_verbatim():
    policy = ContextPolicy(max_tokens=50_000)
    turns = [_turn(1), _turn(2)]

    messages = policy.build("SYSTEM", "TASK", turns)

    assert messages == [
        {"role": "system", "content": "SYSTEM"},
        {"role": "user", "content": "TASK"},
        *turns[0].messages(),
        *turns[1].messages(),
    ]
    assert policy.last_level == 0


def test_two_hundred_turns_stay_under_budget_keeping_system_task_best_kernel_and_last_turn():
    policy = ContextPolicy(max_tokens=16_000, keep_recent_turns=4)
    turns = [_turn(i) for i in range(1, 201)]
    full = messages_tokens([m for t in turns for m in t.messages()])

    for n in (10, 50, 120, 200):
        messages = policy.build("SYSTEM PROMPT", "TASK SOURCE", turns[:n])
        assert messages_tokens(messages) <= 16_000, n

    assert full > 16_000 * 10
    assert messages[0] == {"role": "system", "content": "SYSTEM PROMPT"}
    assert messages[1]["role"] == "user"
    assert messages[1]["content"].startswith("TASK SOURCE\n\n## Progress so far (turns 1–")
    assert messages[-2:] == turns[-1].messages()
    assert [m["role"] for m in messages[2:]] == ["assistant", "user"] * ((len(messages) - 2) // 2)
    # the best kernel (turn 198) is in the recent turns; the best older one survives as source
    assert _kernel(198) in messages[-6]["content"]
    assert (
        "Best kernel so far (turn 195 submit [00000000]: passed, 2.95x vs eager, reward 2.95)"
        in messages[1]["content"]
    )
    assert _kernel(195) in messages[1]["content"]
    assert "- turn 194 submit [00000000]: incorrect, reward 0" in messages[1]["content"]


def test_reasoning_is_dropped_before_kernels():
    policy = ContextPolicy(max_tokens=8_000, keep_recent_turns=2)
    turns = [_turn(i) for i in range(1, 9)]

    messages = policy.build("S", "T", turns)

    assert policy.last_level == 1  # "notes": old reasoning clipped to a note, every old kernel kept
    progress = messages[1]["content"]
    for i in range(1, 7):
        assert _kernel(i) in progress
    assert "Let me think about tiling" * 2 not in progress
    assert messages_tokens(messages) <= 8_000


def test_tiny_budget_still_returns_a_valid_prompt_under_budget():
    policy = ContextPolicy(max_tokens=600, keep_recent_turns=4)
    turns = [_turn(i) for i in range(1, 41)]

    messages = policy.build("S" * 400, "T" * 3000, turns)

    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages_tokens(messages) <= 600


def test_approx_tokens_rounds_up():
    assert approx_tokens("") == 0
    assert approx_tokens("abc") == 1
    assert approx_tokens("a" * 8) == 3
