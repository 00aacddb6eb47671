from agent.llm import Completion, ToolCall
from agent.protocol import find_code_blocks, parse_reply, parse_text_reply

KERNEL = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


def test_last_python_block_defining_model_new_is_the_candidate():
    text = (
        "First try:\n```python\nclass ModelNew:\n    first = 1\n```\n"
        "A helper:\n```python\ndef helper():\n    pass\n```\n"
        f"Final:\n```python\n{KERNEL}```\nDone."
    )

    parsed = parse_text_reply(text)

    assert parsed.errors == []
    assert [(a.tool, a.source) for a in parsed.actions] == [("submit", KERNEL)]


def test_block_without_language_tag_and_crlf_line_endings_are_accepted():
    text = "Reasoning.\r\n```\r\n" + KERNEL.replace("\n", "\r\n") + "```\r\n"

    parsed = parse_text_reply(text)

    assert parsed.errors == []
    assert parsed.actions[0].source == KERNEL


def test_action_line_outside_code_picks_the_tool_and_inside_code_does_not_count():
    text = "ACTION: verify\n```py\n# ACTION: submit\n" + KERNEL + "```\n"

    parsed = parse_text_reply(text)

    assert parsed.actions[0].tool == "verify"
    assert parsed.actions[0].source.startswith("# ACTION: submit\n")


def test_unknown_action_is_a_clear_error():
    parsed = parse_text_reply("ACTION: benchmark\n```python\n" + KERNEL + "```\n")

    assert parsed.actions == []
    assert (
        parsed.errors[0].message
        == "Unknown `ACTION: benchmark`. Use one of: compile, verify, profile, submit."
    )


def test_unterminated_fence_is_reported_and_nothing_is_evaluated():
    parsed = parse_text_reply("Here:\n```python\n" + KERNEL + "    # and then the reply was cut")

    assert parsed.actions == []
    assert parsed.errors[0].message.startswith("Your ```python block (opened on line 2) is never closed")


def test_reply_without_any_block_and_empty_reply_get_observations():
    no_block = parse_text_reply("I think we should use shared memory tiling.")
    empty = parse_text_reply("   \n")
    wrong_block = parse_text_reply("```python\nprint('hi')\n```")
    cpp_only = parse_text_reply("```cpp\nclass ModelNew {};\n```")

    assert no_block.errors[0].message.startswith("No candidate found")
    assert empty.errors[0].message.startswith("Your reply was empty")
    assert wrong_block.errors[0].message.startswith("Your reply has a ```python block, but none")
    assert cpp_only.errors[0].message.startswith("No candidate found")


def test_longer_fences_and_tildes_are_blocks():
    blocks = find_code_blocks("````python\n```inner```\n````\n~~~\nx = 1\n~~~\n")

    assert [(b.language, b.body, b.terminated) for b in blocks] == [
        ("python", "```inner```", True),
        ("", "x = 1", True),
    ]


def test_native_tool_calls_parse_and_bad_arguments_become_errors():
    completion = Completion(
        text="",
        tool_calls=[
            ToolCall(id="a", name="verify", arguments='{"source": "class ModelNew:\\n    pass\\n"}'),
            ToolCall(id="b", name="profile", arguments='{"source": "class ModelNew'),
            ToolCall(id="c", name="rm_rf", arguments="{}"),
            ToolCall(id="d", name="submit", arguments='["not", "an", "object"]'),
            ToolCall(id="e", name="compile", arguments='{"src": "x"}'),
            ToolCall(id="f", name="compile", arguments='{"source": "print(1)"}'),
        ],
    )

    parsed = parse_reply(completion)

    assert parsed.native is True
    assert [(a.call_id, a.tool, a.source) for a in parsed.actions] == [
        ("a", "verify", "class ModelNew:\n    pass\n")
    ]
    messages = {e.call_id: e.message for e in parsed.errors}
    assert messages["b"].startswith("The arguments of `profile` are not valid JSON (Unterminated string")
    assert messages["c"].startswith("Unknown tool 'rm_rf'. Available tools: compile, verify, profile, submit")
    assert messages["d"] == 'The arguments of `submit` must be a JSON object {"source": "..."}, got list.'
    assert messages["e"].startswith("`compile` needs a non-empty string argument `source`")
    assert (
        messages["f"]
        == "The `source` given to `compile` does not define `class ModelNew`. Nothing was evaluated."
    )


def test_reply_without_tool_calls_falls_back_to_text_protocol():
    parsed = parse_reply(Completion(text="```python\n" + KERNEL + "```"))

    assert parsed.native is False
    assert parsed.actions[0].source == KERNEL
