"""The agent's tools, backed by the evaluator: compile, verify, profile, submit.

One candidate source is evaluated once per rollout (the full walk: compile, verify, integrity,
profile) and cached by its hash; each tool reports its own view of that result as concise text.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpu_workers.schema import EvalRequest, EvalResult, source_hash

EvaluateFn = Callable[[EvalRequest], EvalResult]
DEFAULT_OBSERVATION_LIMIT = 4096


def default_evaluate(request: EvalRequest) -> EvalResult:
    from gpu_workers import evaluate  # imported lazily: the evaluator is heavy and optional at import

    return evaluate(request)


def tool_specs() -> list[dict[str, Any]]:
    """OpenAI function-tool schemas for compile, verify, profile and submit."""
    descriptions = {
        "compile": "Build the candidate; returns the build status and compiler log.",
        "verify": "Build and check the candidate against the reference on fresh inputs; returns status, "
        "trials passed, errors and integrity findings.",
        "profile": "Everything verify returns plus median times of the kernel and baselines, and speedups.",
        "submit": "Final evaluation of your answer; a passing submission ends the rollout.",
    }
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": description,
                "parameters": {
                    "type": "object",
                    "properties": {
                        "source": {
                            "type": "string",
                            "description": "The complete Python file defining class ModelNew.",
                        }
                    },
                    "required": ["source"],
                },
            },
        }
        for name, description in descriptions.items()
    ]


def truncate(text: str, limit: int = DEFAULT_OBSERVATION_LIMIT) -> str:
    """Keep the head and the tail (errors sit at both ends of compiler logs)."""
    if len(text) <= limit:
        return text
    marker = f"\n… [{len(text) - limit} characters cut] …\n"
    keep = max(0, limit - len(marker))
    head = keep // 2
    tail = keep - head
    return text[:head] + marker + (text[-tail:] if tail else "")


def _fmt_ms(value: Any) -> str:
    return f"{value:.4g} ms" if isinstance(value, int | float) else "n/a"


def _fmt_x(value: Any) -> str:
    return f"{value:.3g}x" if isinstance(value, int | float) else "n/a"


def _findings_text(result: EvalResult) -> str:
    if not result.findings:
        return ""
    lines = [f"- [{f.severity}] {f.rule}: {f.message}" for f in result.findings]
    return "findings:\n" + "\n".join(lines)


def _compiled(result: EvalResult) -> bool:
    return result.status != "compile_error"


def describe_compile(result: EvalResult, limit: int) -> str:
    if not _compiled(result):
        body = f"compile: FAILED\n{result.message}".rstrip()
        if result.compile_log:
            body += "\ncompiler log:\n" + result.compile_log
        return truncate(body, limit)
    took = f" in {_fmt_ms(result.compile_ms)}" if result.compile_ms is not None else ""
    body = f"compile: ok{took}"
    if result.status == "timeout" and not result.timings_ms:
        body = f"compile: timeout\n{result.message}"
    return truncate(body, limit)


def describe_verify(result: EvalResult, limit: int) -> str:
    if not _compiled(result):
        return describe_compile(result, limit)
    lines = [f"status: {result.status}", f"correct: {str(result.correct).lower()}"]
    if result.trials:
        lines.append(f"trials passed: {result.trials_passed}/{result.trials}")
    if result.max_abs_error is not None:
        lines.append(f"max abs error: {result.max_abs_error:.3g}")
    if result.max_rel_error is not None:
        lines.append(f"max rel error: {result.max_rel_error:.3g}")
    if result.message:
        lines.append(f"message: {result.message}")
    findings = _findings_text(result)
    if findings:
        lines.append(findings)
    if result.status in ("runtime_error", "timeout") and result.run_log:
        lines.append("log:\n" + result.run_log)
    return truncate("\n".join(lines), limit)


def describe_profile(result: EvalResult, limit: int) -> str:
    text = describe_verify(result, limit)
    if not _compiled(result):
        return text
    timings = result.timings_ms or {}
    speedup = result.speedup or {}
    parts = [f"kernel {_fmt_ms(timings.get('kernel'))}"]
    for baseline in ("eager", "compile"):
        if timings.get(baseline) is not None:
            parts.append(
                f"{baseline} {_fmt_ms(timings.get(baseline))} (speedup {_fmt_x(speedup.get(baseline))})"
            )
    timing_line = "timings: " + ", ".join(parts) if timings else "timings: not measured"
    return truncate(timing_line + "\n" + text, limit)


def describe_submit(result: EvalResult, limit: int, *, accepted: bool, reason: str = "") -> str:
    head = "submission: ACCEPTED" if accepted else "submission: NOT ACCEPTED"
    if reason:
        head += f" ({reason})"
    head += f"\nreward: {result.reward:.4g}"
    return truncate(head + "\n" + describe_profile(result, limit), limit)


@dataclass
class ToolResult:
    tool: str
    source: str
    result: EvalResult
    observation: str
    passed: bool
    cached: bool = False
    error: str = ""  # the evaluator itself failed (not the kernel)
    extra: dict[str, Any] = field(default_factory=dict)


class KernelTools:
    """Evaluates candidates for one task with one device/track; caches by kernel source hash."""

    def __init__(
        self,
        task_source: str,
        *,
        evaluate_fn: EvaluateFn | None = None,
        device: str = "cpu",
        track: str = "strict",
        task_name: str = "",
        baselines: tuple[str, ...] = ("eager",),
        trials: int = 3,
        observation_limit: int = DEFAULT_OBSERVATION_LIMIT,
        request_overrides: dict[str, Any] | None = None,
    ) -> None:
        self.task_source = task_source
        self.evaluate_fn = evaluate_fn or default_evaluate
        self.device = device
        self.track = track
        self.task_name = task_name
        self.baselines = tuple(baselines)
        self.trials = trials
        self.observation_limit = observation_limit
        self.request_overrides = dict(request_overrides or {})
        self._cache: dict[str, EvalResult] = {}
        self.evaluations = 0  # calls that reached the evaluator

    def request_for(self, source: str) -> EvalRequest:
        return EvalRequest(
            task_source=self.task_source,
            kernel_source=source,
            device=self.device,
            track=self.track,
            task_name=self.task_name,
            baselines=self.baselines,
            trials=self.trials,
            **self.request_overrides,
        )

    def evaluate(self, source: str) -> tuple[EvalResult, bool, str]:
        """(result, cached, evaluator error text)."""
        key = source_hash(source)
        if key in self._cache:
            return self._cache[key], True, ""
        self.evaluations += 1
        try:
            result = self.evaluate_fn(self.request_for(source))
        except Exception as exc:  # the evaluator failing must cost one action, not the rollout
            detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            result = EvalResult(
                status="runtime_error",
                message=f"the evaluator failed: {detail}",
                kernel_hash=key,
            )
            return result, False, detail
        self._cache[key] = result
        return result, False, ""

    def run(self, tool: str, source: str) -> ToolResult:
        result, cached, error = self.evaluate(source)
        passed = result.status == "passed"
        limit = self.observation_limit
        if tool == "compile":
            text = describe_compile(result, limit)
        elif tool == "verify":
            text = describe_verify(result, limit)
        elif tool == "profile":
            text = describe_profile(result, limit)
        elif tool == "submit":
            text = describe_submit(result, limit, accepted=passed)
        else:
            raise ValueError(f"unknown tool {tool!r}")
        if error:
            text = truncate(f"evaluator error (not your kernel's fault, try again): {error}", limit)
        return ToolResult(
            tool=tool,
            source=source,
            result=result,
            observation=text,
            passed=passed,
            cached=cached,
            error=error,
        )
