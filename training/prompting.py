"""Prompts, reply parsing and observations for training rollouts.

We reuse the agent's prompt and protocol helpers (``agent.prompts``, ``agent.protocol``) so a policy
trained here answers the way the agent loop expects; when ``agent`` is not importable (a bare GPU
node with only torch), small local equivalents keep the same behaviour for the text protocol.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from training.data import TrainingTask

PROMPT_STYLES = ("agent", "short")


@dataclass
class PromptSettings:
    style: str = "agent"  # "agent": the agent's system + task prompt; "short": one line (tiny models)
    device: str = "cpu"
    track: str = "open"


def build_prompt(task: TrainingTask, settings: PromptSettings, variants: list[dict[str, Any]] | None = None
                 ) -> tuple[str, str]:
    """(system, user) for the first turn; ``variants`` (CUDA-L1 contrastive) are earlier kernels with
    their speedups: ``{"source", "speedup", "status"}``."""
    if settings.style == "short":
        return "", f"Task {task.name}:"
    if settings.style != "agent":
        raise ValueError(f"unknown prompt style {settings.style!r}; choose from {PROMPT_STYLES}")
    try:
        from agent import prompts
    except ImportError:
        return _local_system(settings), _local_task(task, settings, variants)
    system = prompts.system_prompt(track=settings.track, device=settings.device)
    if variants:
        chosen = [prompts.Variant.from_dict(v) for v in variants]
        user = prompts.contrastive_prompt(task.task_source, chosen, task_name=task.name,
                                          device=settings.device, track=settings.track)
    else:
        user = prompts.task_prompt(task.task_source, task_name=task.name, device=settings.device,
                                   track=settings.track)
    return system, user


def _local_system(settings: PromptSettings) -> str:
    return (f"Write `class ModelNew`, a faster implementation of the reference `Model` for device "
            f"`{settings.device}` on track `{settings.track}`. Answer with one ```python block.")


def _local_task(task: TrainingTask, settings: PromptSettings, variants: list[dict[str, Any]] | None) -> str:
    parts = [f"Task `{task.name}`:\n```python\n{task.task_source.rstrip()}\n```"]
    for i, v in enumerate(variants or [], start=1):
        parts.append(f"Variant {i} (speedup {v.get('speedup')}):\n```python\n{v['source'].rstrip()}\n```")
    return "\n\n".join(parts)


_BLOCK = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_kernel(text: str) -> tuple[str | None, str]:
    """(kernel source, error message): the last python block that defines ``class ModelNew``."""
    try:
        from agent.protocol import parse_text_reply
    except ImportError:
        blocks = [b for b in _BLOCK.findall(text) if re.search(r"^\s*class\s+ModelNew\b", b, re.MULTILINE)]
        if not blocks:
            return None, "No candidate found: reply with one ```python block that defines `class ModelNew`."
        return blocks[-1].strip("\n") + "\n", ""
    parsed = parse_text_reply(text)
    if parsed.actions:
        return parsed.actions[-1].source, ""
    return None, parsed.errors[0].message if parsed.errors else "no candidate"


def render_observation(outcome: Any) -> str:
    """What the policy reads after a turn: the verdict, errors and speedups, kept short."""
    if outcome.error:
        return f"status: {outcome.status}\n{outcome.error}"
    result = outcome.result or {}
    lines = [f"status: {outcome.status}", f"reward: {outcome.reward:g}"]
    speedup = result.get("speedup") or {}
    for name in ("eager", "compile"):
        if speedup.get(name) is not None:
            lines.append(f"speedup vs {name}: {speedup[name]:.3f}x")
    for finding in result.get("findings", [])[:3]:
        lines.append(f"finding {finding.get('rule')} ({finding.get('severity')}): {finding.get('message', '')[:200]}")
    message = (result.get("message") or "")[:500]
    if message:
        lines.append(message)
    return "\n".join(lines)
