"""Prompts written by us: the system prompt (rules, tools, protocol), the task prompt, and CUDA-L1's
contrastive prompt (earlier variants with measured speedups from different buckets)."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_TRACK_RULES = {
    "strict": (
        "- Track `strict`: the computation in `ModelNew.forward` must be done by YOUR OWN kernels "
        "(built with `torch.utils.cpp_extension.load_inline`). Calling PyTorch compute ops "
        "(`torch.matmul`, `F.conv2d`, `x @ w`, `torch.relu`, cuBLAS/cuDNN wrappers, …) inside "
        "`forward` is library compute and is rejected. Allocating outputs (`torch.empty`) and "
        "reading parameters is fine.\n"
        "- No library fallback: never wrap your kernel in `try:` … `except:` that falls back to "
        "PyTorch, and never branch to PyTorch for some shapes. A fallback is rejected even when "
        "it is never taken."
    ),
    "open": (
        "- Track `open`: PyTorch-level rewrites (fusing, reordering, better ops) are allowed, and "
        "custom kernels built with `torch.utils.cpp_extension.load_inline` are encouraged."
    ),
}

_DEVICE_NOTES = {
    "cpu": "The kernel runs on the CPU: write C++ (OpenMP/vectorisation welcome) for `load_inline`'s "
    "`cpp_sources`; there is no GPU.",
    "cuda": "The kernel runs on an NVIDIA GPU: write CUDA C++ for `load_inline`'s `cuda_sources` "
    "(with a C++ declaration in `cpp_sources`).",
}

_COMMON_RULES = """\
- Keep the reference's semantics exactly: same outputs (shape, dtype, values within tolerance) for \
any valid input of the given shapes, not only for the test inputs. Compute in the reference's dtype; \
do not downcast (no fp16/bf16/TF32/autocast for an fp32 task).
- `class ModelNew(nn.Module)` must take the same constructor arguments as `Model` and keep any \
parameters it needs; `forward` takes the same inputs as `Model.forward`.
- Do not game the measurement: no extra CUDA streams or threads that finish work after `forward` \
returns, no caching of outputs across calls, no reading of the caller's frames or the garbage \
collector, no patching of timers or comparison functions, no changing inputs in place. The evaluator \
checks for each of these; a kernel that does any of them is rejected and scores zero."""

_TOOLS_TEXT = """\
You act through four tools; each takes `source`, the complete Python file that defines `ModelNew` \
(imports, kernel sources, the `load_inline` call, the class):
- `compile(source)`: builds it; returns the build status and the compiler log (truncated).
- `verify(source)`: builds and runs it against the reference on fresh random inputs; returns the \
status (passed, incorrect, runtime_error, rejected, …), how many trials passed, the largest errors \
and any integrity findings.
- `profile(source)`: everything `verify` returns plus median times of your kernel and of the \
baselines (eager PyTorch, torch.compile when measured) and the speedups.
- `submit(source)`: the final evaluation of your answer. If it passes, the rollout ends (unless a \
target speedup is set and not yet reached); if not, you get the result and may continue."""

_PROTOCOL_TOOLS = """\
Call the tools with your endpoint's native tool calls. You may also answer in plain text with a \
fenced ```python block as described below."""

_PROTOCOL_TEXT = """\
Answer in plain text. Think about the problem first, then give your candidate as ONE fenced code \
block that starts with ```python and ends with ``` and contains the whole file defining \
`class ModelNew`. Only the last such block in your reply is used. To choose the tool that runs \
it, put a line `ACTION: compile`, `ACTION: verify`, `ACTION: profile` or `ACTION: submit` in your \
reply; without one, the candidate is submitted."""


def system_prompt(*, track: str = "strict", device: str = "cpu", tools: bool = False) -> str:
    """Our system prompt: the job, the rules of the track, what each tool returns, how to answer."""
    if track not in _TRACK_RULES:
        raise ValueError(f"unknown track {track!r}")
    if device not in _DEVICE_NOTES:
        raise ValueError(f"unknown device {device!r}")
    protocol = _PROTOCOL_TOOLS + "\n\n" + _PROTOCOL_TEXT if tools else _PROTOCOL_TEXT
    return (
        "You are an expert performance engineer. You are given a PyTorch reference `Model`; write "
        "`ModelNew`, a faster implementation with custom kernels that computes the same thing. Work "
        "in rounds: analyse the task, write a kernel, compile it, verify it, profile it, reflect on "
        "the numbers, and try again until it is correct and fast.\n\n"
        f"{_DEVICE_NOTES[device]}\n\n"
        "## Rules\n"
        f"{_TRACK_RULES[track]}\n{_COMMON_RULES}\n\n"
        "## Tools\n"
        f"{_TOOLS_TEXT}\n\n"
        "## How to answer\n"
        f"{protocol}\n"
    )


def task_prompt(task_source: str, *, task_name: str = "", device: str = "cpu", track: str = "strict") -> str:
    title = f" `{task_name}`" if task_name else ""
    return (
        f"Optimise the task{title} for device `{device}` on track `{track}`.\n\n"
        "The reference (KernelBench format: `Model`, `get_inputs()`, `get_init_inputs()`):\n\n"
        f"```python\n{task_source.rstrip()}\n```\n\n"
        "Write `class ModelNew` with the same constructor and forward signature."
    )


# --------------------------------------------------------------------------------------------------
# Contrastive mode (CUDA-L1)

DEFAULT_BUCKET_EDGES = (1.0, 1.5, 3.0)


@dataclass
class Variant:
    """An earlier version of a kernel for the same task and its measured result."""

    source: str
    speedup: float | None  # vs eager; None when it did not pass
    status: str = "passed"
    note: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed" and self.speedup is not None

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "speedup": self.speedup, "status": self.status, "note": self.note}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Variant:
        source = data.get("source", data.get("kernel_source"))
        if not isinstance(source, str) or not source.strip():
            raise ValueError("a variant needs a non-empty 'source' (or 'kernel_source')")
        speedup = data.get("speedup")
        if isinstance(speedup, dict):  # an EvalResult's speedup map
            speedup = speedup.get("eager")
        status = str(data.get("status", "passed" if speedup is not None else "incorrect"))
        return cls(
            source=source,
            speedup=float(speedup) if speedup is not None else None,
            status=status,
            note=str(data.get("note", "")),
        )


def load_variants(path: str | Path) -> list[Variant]:
    """Variants from a JSON list or a JSON-lines file of ``{"source", "speedup", "status"}``."""
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.strip()
    if not stripped:
        return []
    if stripped.startswith("["):
        rows = json.loads(stripped)
    else:
        rows = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{number}: not JSON: {exc}") from exc
    return [Variant.from_dict(row) for row in rows]


def speedup_bucket(variant: Variant, edges: Sequence[float] = DEFAULT_BUCKET_EDGES) -> int:
    """0 for a failed variant; 1 + the number of edges at or below its speedup otherwise."""
    if not variant.passed:
        return 0
    assert variant.speedup is not None
    return 1 + sum(1 for edge in edges if variant.speedup >= edge)


def sample_contrastive(
    variants: Iterable[Variant],
    k: int,
    *,
    edges: Sequence[float] = DEFAULT_BUCKET_EDGES,
    rng: random.Random | None = None,
    include_failed: bool = False,
) -> list[Variant]:
    """Up to ``k`` variants spread over speedup buckets: one from each bucket (fastest buckets
    first), then a second round, and so on. Returned slowest first, so the prompt reads as a climb."""
    rng = rng or random.Random(0)
    buckets: dict[int, list[Variant]] = {}
    for variant in variants:
        bucket = speedup_bucket(variant, edges)
        if bucket == 0 and not include_failed:
            continue
        buckets.setdefault(bucket, []).append(variant)
    for members in buckets.values():
        rng.shuffle(members)
    order = sorted(buckets, reverse=True)
    chosen: list[Variant] = []
    while len(chosen) < k and any(buckets[b] for b in order):
        for bucket in order:
            if buckets[bucket] and len(chosen) < k:
                chosen.append(buckets[bucket].pop())
    return sorted(chosen, key=lambda v: (v.speedup is not None, v.speedup or 0.0))


def contrastive_prompt(
    task_source: str,
    variants: Sequence[Variant],
    *,
    task_name: str = "",
    device: str = "cpu",
    track: str = "strict",
) -> str:
    """The task prompt plus earlier variants and their speedups, asking for an analysis first."""
    parts = [task_prompt(task_source, task_name=task_name, device=device, track=track), ""]
    if variants:
        parts.append(
            f"Here are {len(variants)} earlier implementations of this task with their measured "
            "speedups over eager PyTorch (same device, same inputs):"
        )
        for i, variant in enumerate(variants, start=1):
            if variant.passed:
                score = f"speedup {variant.speedup:.2f}x"
            else:
                score = f"status {variant.status} (no speedup)"
            note = f" — {variant.note}" if variant.note else ""
            parts.append(f"\n### Variant {i}: {score}{note}\n```python\n{variant.source.rstrip()}\n```")
        parts.append(
            "\nBefore writing code, analyse these variants: explain why the faster ones are faster "
            "than the slower ones (memory access, parallelism, fusion, arithmetic), and which of "
            "those ideas can be combined or pushed further. Then write a new version that you "
            "expect to beat all of them."
        )
    return "\n".join(parts)
