"""Reading the model's reply: native tool calls, or the plain-text protocol (a fenced ```python block
that defines ``class ModelNew`` plus an optional ``ACTION: <tool>`` line).

Nothing here raises on malformed output: every problem becomes a :class:`ProtocolError` whose message
is the observation the model gets back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agent.llm import Completion, ToolCall

TOOL_NAMES = ("compile", "verify", "profile", "submit")
DEFAULT_TEXT_ACTION = "submit"
PYTHON_TAGS = frozenset({"", "python", "py", "python3", "py3"})

_OPEN_FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
_MODELNEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)
_ACTION = re.compile(
    r"^[ \t>*_#-]*ACTION[ \t]*:[ \t]*`?(?P<name>[A-Za-z_]*)`?[ \t*_.]*$", re.MULTILINE | re.IGNORECASE
)


@dataclass
class CodeBlock:
    language: str
    body: str
    terminated: bool
    start_line: int  # 1-based line of the opening fence


@dataclass
class Action:
    """One evaluation the model asked for."""

    tool: str
    source: str
    call_id: str | None = None  # the native tool call's id; None for the text protocol


@dataclass
class ProtocolError:
    message: str
    call_id: str | None = None
    tool: str = ""


@dataclass
class ParsedReply:
    actions: list[Action] = field(default_factory=list)
    errors: list[ProtocolError] = field(default_factory=list)
    native: bool = False  # the reply used native tool calls


def normalise_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def find_code_blocks(text: str) -> list[CodeBlock]:
    """Fenced blocks (``` or ~~~, any length ≥ 3), in order; an unclosed one runs to the end."""
    lines = normalise_newlines(text).split("\n")
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        match = _OPEN_FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence = match.group("fence")
        info = match.group("info").strip()
        language = info.split()[0].lower() if info else ""
        closing = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not closing.match(lines[j]):
            body.append(lines[j])
            j += 1
        terminated = j < len(lines)
        blocks.append(
            CodeBlock(language=language, body="\n".join(body), terminated=terminated, start_line=i + 1)
        )
        i = j + 1
    return blocks


def defines_model_new(source: str) -> bool:
    return bool(_MODELNEW.search(source))


def _text_outside_blocks(text: str) -> str:
    """The reply with fenced blocks removed, so ``ACTION:`` inside code does not count."""
    out: list[str] = []
    lines = normalise_newlines(text).split("\n")
    inside: re.Pattern[str] | None = None
    for line in lines:
        if inside is None:
            match = _OPEN_FENCE.match(line)
            if match:
                fence = match.group("fence")
                inside = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
                continue
            out.append(line)
        elif inside.match(line):
            inside = None
    return "\n".join(out)


def parse_text_reply(text: str, *, default_action: str = DEFAULT_TEXT_ACTION) -> ParsedReply:
    """The plain-text protocol: the last python block defining ``class ModelNew`` is the candidate."""
    if not text or not text.strip():
        return ParsedReply(
            errors=[
                ProtocolError(
                    "Your reply was empty. Reply with your reasoning and one ```python block that defines "
                    "`class ModelNew`."
                )
            ]
        )
    blocks = find_code_blocks(text)
    candidates = [b for b in blocks if b.language in PYTHON_TAGS and defines_model_new(b.body)]
    tool = default_action
    actions = [m.group("name").lower() for m in _ACTION.finditer(_text_outside_blocks(text))]
    if actions:
        tool = actions[-1]
        if tool not in TOOL_NAMES:
            return ParsedReply(
                errors=[
                    ProtocolError(
                        f"Unknown `ACTION: {actions[-1]}`. Use one of: " + ", ".join(TOOL_NAMES) + "."
                    )
                ]
            )
    if not candidates:
        if any(b.language in PYTHON_TAGS for b in blocks):
            message = (
                "Your reply has a ```python block, but none of them defines `class ModelNew`. Put the "
                "whole file (imports, kernel sources, load_inline, `class ModelNew`) in one block."
            )
        elif any(not b.terminated for b in blocks):
            message = (
                "Your reply opens a ``` code block that is never closed and defines no `class ModelNew`. "
                "Close the block with ``` on its own line."
            )
        else:
            message = (
                "No candidate found: reply with one fenced ```python block containing the complete "
                "file that defines `class ModelNew`."
            )
        return ParsedReply(errors=[ProtocolError(message)])
    last = candidates[-1]
    if not last.terminated:
        return ParsedReply(
            errors=[
                ProtocolError(
                    f"Your ```python block (opened on line {last.start_line}) is never closed, so the code may "
                    "be cut off (was the reply too long?). Nothing was evaluated. Send the complete file again "
                    "and end the block with ``` on its own line."
                )
            ]
        )
    return ParsedReply(actions=[Action(tool=tool, source=last.body.strip("\n") + "\n")])


def parse_tool_call(call: ToolCall) -> Action | ProtocolError:
    name = (call.name or "").strip()
    if name not in TOOL_NAMES:
        return ProtocolError(
            f"Unknown tool {name!r}. Available tools: "
            + ", ".join(TOOL_NAMES)
            + '; each takes {"source": "..."}.',
            call_id=call.id,
            tool=name,
        )
    try:
        args: Any = json.loads(call.arguments) if call.arguments.strip() else {}
    except json.JSONDecodeError as exc:
        return ProtocolError(
            f"The arguments of `{name}` are not valid JSON ({exc.msg} at line {exc.lineno} column "
            f'{exc.colno}). Send {{"source": "<the whole file>"}} with the source as one JSON string.',
            call_id=call.id,
            tool=name,
        )
    if not isinstance(args, dict):
        return ProtocolError(
            f'The arguments of `{name}` must be a JSON object {{"source": "..."}}, got {type(args).__name__}.',
            call_id=call.id,
            tool=name,
        )
    source = args.get("source")
    if not isinstance(source, str) or not source.strip():
        return ProtocolError(
            f"`{name}` needs a non-empty string argument `source` (the whole file defining `class ModelNew`).",
            call_id=call.id,
            tool=name,
        )
    source = normalise_newlines(source)
    if not defines_model_new(source):
        return ProtocolError(
            f"The `source` given to `{name}` does not define `class ModelNew`. Nothing was evaluated.",
            call_id=call.id,
            tool=name,
        )
    return Action(tool=name, source=source, call_id=call.id)


def parse_reply(completion: Completion, *, default_action: str = DEFAULT_TEXT_ACTION) -> ParsedReply:
    """Native tool calls when the reply has any; the plain-text protocol otherwise."""
    if completion.tool_calls:
        reply = ParsedReply(native=True)
        for call in completion.tool_calls:
            parsed = parse_tool_call(call)
            if isinstance(parsed, Action):
                reply.actions.append(parsed)
            else:
                reply.errors.append(parsed)
        return reply
    return parse_text_reply(completion.text, default_action=default_action)
