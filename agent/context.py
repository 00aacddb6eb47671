"""The context policy: keep a long rollout's conversation inside a token budget.

What is kept, in order of priority (Kevin-32B's recipe): the system prompt and the task always; the
most recent turns verbatim; every earlier kernel with its result, condensed; short summaries of older
turns. Old reasoning text goes first, then old kernel sources (the best ones stay), then old summary
lines (folded into one line of totals), then recent turns one by one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

TokenCounter = Callable[[str], int]
MESSAGE_OVERHEAD_TOKENS = 4


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate (about 3.5 characters per token for code), rounded up."""
    return math.ceil(len(text) / 3.5) if text else 0


@dataclass
class CandidateRecord:
    """A kernel the model sent and what the evaluator said about it."""

    turn: int
    tool: str
    source: str
    kernel_hash: str
    status: str
    correct: bool
    reward: float
    speedup: float | None  # vs eager

    def result_line(self) -> str:
        speed = f", {self.speedup:.3g}x vs eager" if self.speedup is not None else ""
        return f"turn {self.turn} {self.tool} [{self.kernel_hash[:8]}]: {self.status}{speed}, reward {self.reward:.3g}"

    def rank_key(self) -> tuple[float, bool, float]:
        """Highest reward first; a passing kernel beats a failing one of equal reward; then speed."""
        return (self.reward, self.status == "passed", self.speedup if self.speedup is not None else 0.0)


@dataclass
class TurnRecord:
    """One assistant reply and the messages that answered it, as sent to the model."""

    index: int
    assistant: dict[str, Any]
    observations: list[dict[str, Any]] = field(default_factory=list)
    candidates: list[CandidateRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # protocol errors, one line each

    @property
    def reasoning(self) -> str:
        return self.assistant.get("content") or ""

    def messages(self) -> list[dict[str, Any]]:
        return [self.assistant, *self.observations]


def message_tokens(message: dict[str, Any], count: TokenCounter) -> int:
    total = MESSAGE_OVERHEAD_TOKENS + count(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        total += count(function.get("name", "")) + count(function.get("arguments", ""))
    return total


def messages_tokens(messages: Sequence[dict[str, Any]], count: TokenCounter = approx_tokens) -> int:
    return sum(message_tokens(m, count) for m in messages)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _clip_block(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = f"\n… [{len(text) - limit} characters cut] …\n"
    keep = max(0, limit - len(marker))
    return text[: keep // 2] + marker + text[len(text) - (keep - keep // 2) :]


@dataclass
class ContextPolicy:
    """Builds the prompt for the next turn from the system prompt, the task and all turns so far."""

    max_tokens: int = 28000
    keep_recent_turns: int = 4
    keep_best_kernels: int = 2
    max_summary_lines: int = 60
    note_chars: int = 160
    count_tokens: TokenCounter = approx_tokens
    last_level: int = field(default=0, init=False)  # how hard the last build had to squeeze

    def build(self, system: str, task: str, turns: Sequence[TurnRecord]) -> list[dict[str, Any]]:
        plans = [(0, len(turns), "full")]
        recent = min(self.keep_recent_turns, len(turns))
        for level in ("notes", "kernels", "lines"):
            plans.append((len(plans), recent, level))
        for r in range(recent - 1, -1, -1):
            plans.append((len(plans), r, "lines"))
        for level_no, keep_recent, mode in plans:
            messages = self._render(system, task, turns, keep_recent, mode)
            if messages_tokens(messages, self.count_tokens) <= self.max_tokens:
                self.last_level = level_no
                return messages
        self.last_level = len(plans)
        return self._squeeze(system, task, turns)

    # ------------------------------------------------------------------------------------------

    def _render(
        self, system: str, task: str, turns: Sequence[TurnRecord], keep_recent: int, mode: str
    ) -> list[dict[str, Any]]:
        old = list(turns[: len(turns) - keep_recent]) if keep_recent < len(turns) else []
        recent = list(turns[len(turns) - keep_recent :]) if keep_recent else []
        task_text = task
        if old:
            task_text = task + "\n\n" + self._progress(old, list(turns), mode)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": system},
            {"role": "user", "content": task_text},
        ]
        if not recent:
            # the conversation must continue from a user turn; the progress block is that turn
            return messages
        for turn in recent:
            messages.extend(turn.messages())
        return messages

    def _progress(self, old: list[TurnRecord], all_turns: list[TurnRecord], mode: str) -> str:
        first, last = old[0].index, old[-1].index
        lines = [f"## Progress so far (turns {first}–{last}, condensed; reasoning omitted)"]
        candidates = [c for t in old for c in t.candidates]
        every_candidate = [c for t in all_turns for c in t.candidates]
        if mode in ("full", "notes"):
            for turn in old:
                if mode == "notes" and turn.reasoning.strip():
                    lines.append(f"\nTurn {turn.index} note: {_clip(turn.reasoning, self.note_chars)}")
                for note in turn.notes:
                    lines.append(f"Turn {turn.index}: {note}")
                for cand in turn.candidates:
                    lines.append(f"Turn {turn.index}: {cand.result_line()}")
                    lines.append(f"```python\n{cand.source.rstrip()}\n```")
            return "\n".join(lines)
        # "kernels" and "lines": results one line each, sources only for the best few
        result_lines = [f"- {c.result_line()}" for c in candidates]
        error_count = sum(len(t.notes) for t in old)
        if mode == "lines" and len(result_lines) > self.max_summary_lines:
            folded = candidates[: len(candidates) - self.max_summary_lines]
            passed = sum(1 for c in folded if c.status == "passed")
            speeds = [c.speedup for c in folded if c.speedup is not None and c.status == "passed"]
            best = f", best {max(speeds):.3g}x" if speeds else ""
            result_lines = [
                f"- {len(folded)} earlier candidates (turns {folded[0].turn}–{folded[-1].turn}): "
                f"{passed} passed{best}",
                *result_lines[len(folded) :],
            ]
        lines.extend(result_lines)
        if error_count:
            lines.append(f"- {error_count} replies had no usable candidate (protocol errors)")
        best_sources = sorted(every_candidate, key=lambda c: c.rank_key(), reverse=True)
        shown: set[str] = set()
        kept = []
        for cand in best_sources:
            if cand.kernel_hash in shown or cand.status != "passed":
                continue
            shown.add(cand.kernel_hash)
            kept.append(cand)
            if len(kept) >= self.keep_best_kernels:
                break
        old_hashes = {c.kernel_hash for c in candidates}
        for cand in kept:
            if cand.kernel_hash in old_hashes:
                lines.append(
                    f"\nBest kernel so far ({cand.result_line()}):\n```python\n{cand.source.rstrip()}\n```"
                )
        if candidates and mode == "kernels" and candidates[-1].kernel_hash not in shown:
            last = candidates[-1]
            lines.append(
                f"\nLatest earlier kernel ({last.result_line()}):\n```python\n{last.source.rstrip()}\n```"
            )
        return "\n".join(lines)

    def _squeeze(self, system: str, task: str, turns: Sequence[TurnRecord]) -> list[dict[str, Any]]:
        """Last resort: clip the task's progress block and the system prompt to fit."""
        messages = self._render(system, task, turns, 0, "lines")
        budget_chars = int(self.max_tokens * 3.5) - 64
        system_chars = min(len(system), budget_chars // 3)
        messages[0]["content"] = _clip_block(system, system_chars)
        messages[1]["content"] = _clip_block(
            messages[1]["content"], max(0, budget_chars - system_chars - 200)
        )
        while (
            messages_tokens(messages, self.count_tokens) > self.max_tokens
            and len(messages[1]["content"]) > 200
        ):
            messages[1]["content"] = _clip_block(
                messages[1]["content"], int(len(messages[1]["content"]) * 0.8)
            )
        return messages
