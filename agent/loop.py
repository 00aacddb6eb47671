"""The rollout loop: write → compile → verify → profile → reflect, until success or a budget runs out.

Pure library: the CLI, the web app's Celery task and training's rollout collection call
:func:`run_rollout` and pass their own sink, client and (optionally) evaluator.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.context import CandidateRecord, ContextPolicy, TokenCounter, TurnRecord, approx_tokens
from agent.events import EventRecorder, EventSink, ListSink
from agent.llm import ChatClient, Completion
from agent.prompts import Variant, contrastive_prompt, sample_contrastive, system_prompt, task_prompt
from agent.protocol import DEFAULT_TEXT_ACTION, parse_reply
from agent.tools import DEFAULT_OBSERVATION_LIMIT, EvaluateFn, KernelTools, ToolResult, tool_specs

STOP_REASONS = (
    "success",  # a submission passed (and reached the target speedup, when one is set)
    "max_turns",
    "token_budget",
    "wall_clock",
    "cancelled",
    "no_progress",  # too many replies in a row without a usable candidate
    "llm_error",  # the model endpoint failed after its retries
)


@dataclass
class RolloutConfig:
    """Settings of one rollout; plain data, stored with the rollout."""

    max_turns: int = 200
    max_total_tokens: int | None = None  # prompt + completion tokens over the whole rollout
    max_wall_s: float | None = None
    context_tokens: int = 32768  # the model's window: prompt budget = this - max_completion_tokens
    max_completion_tokens: int = 4096
    temperature: float = 0.7
    device: str = "cpu"
    track: str = "strict"
    task_name: str = ""
    # CUDA Agent's bar: measure torch.compile too and keep going until a kernel beats it by 5%.
    baselines: tuple[str, ...] = ("eager", "compile")
    trials: int = 5
    use_tools: bool = False  # offer native tool calls; the plain-text protocol always works
    text_default_action: str = DEFAULT_TEXT_ACTION
    target_speedup: float | None = 1.05  # None: the first passing submission ends the rollout
    target_baseline: str = "compile"  # the baseline target_speedup is measured against
    max_consecutive_invalid: int = 8
    keep_recent_turns: int = 4
    observation_limit: int = DEFAULT_OBSERVATION_LIMIT
    contrastive_variants: list[Variant] = field(default_factory=list)
    contrastive_k: int = 4
    seed: int = 0
    record_token_ids: bool = False  # put prompt/completion token ids on assistant events (local models)
    request_overrides: dict[str, Any] = field(default_factory=dict)  # extra EvalRequest fields

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.max_completion_tokens >= self.context_tokens:
            raise ValueError("max_completion_tokens must be smaller than context_tokens")
        self.baselines = tuple(self.baselines)
        if self.target_speedup is not None and self.target_baseline not in self.baselines:
            raise ValueError(
                f"target_baseline {self.target_baseline!r} is not measured: add it to baselines "
                f"{list(self.baselines)} or set target_speedup to None"
            )

    @classmethod
    def for_evaluation(cls, **overrides: Any) -> RolloutConfig:
        """CUDA Agent's evaluation setting: up to 200 rounds."""
        return cls(**{"max_turns": 200, "temperature": 0.7, **overrides})

    @classmethod
    def for_training(cls, **overrides: Any) -> RolloutConfig:
        """CUDA Agent's training setting: up to 150 rounds, sampling at temperature 1."""
        return cls(**{"max_turns": 150, "temperature": 1.0, "record_token_ids": True, **overrides})

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["baselines"] = list(self.baselines)
        data["contrastive_variants"] = [v.to_dict() for v in self.contrastive_variants]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"unknown RolloutConfig fields: {unknown}")
        kwargs = dict(data)
        if "baselines" in kwargs:
            kwargs["baselines"] = tuple(kwargs["baselines"])
        if "contrastive_variants" in kwargs:
            kwargs["contrastive_variants"] = [
                v if isinstance(v, Variant) else Variant.from_dict(v) for v in kwargs["contrastive_variants"]
            ]
        return cls(**kwargs)


@dataclass
class RolloutSummary:
    rollout_id: str
    stop_reason: str
    turns: int
    evaluations: int
    prompt_tokens: int
    completion_tokens: int
    elapsed_s: float
    task_name: str = ""
    best_kernel: str | None = None
    best_evaluation: dict[str, Any] | None = None
    best_reward: float | None = None
    best_speedup: float | None = None
    best_turn: int | None = None
    passed: bool = False  # the best kernel passed
    candidates: list[dict[str, Any]] = field(
        default_factory=list
    )  # turn, tool, hash, status, reward, speedup
    error: str = ""
    last_seq: int = -1

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["total_tokens"] = self.total_tokens
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutSummary:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def headline(self) -> str:
        best = "no passing kernel"
        if self.best_evaluation is not None:
            speed = f" {self.best_speedup:.3g}x" if self.best_speedup is not None else ""
            best = f"best: turn {self.best_turn} {self.best_evaluation.get('status')}{speed} reward {self.best_reward:.3g}"
        return (
            f"rollout {self.rollout_id}: {self.stop_reason} after {self.turns} turns, "
            f"{self.evaluations} evaluations, {self.total_tokens} tokens, {self.elapsed_s:.1f}s; {best}"
        )


class _TurnObservations:
    """Emits the observations of one turn and collects them for the next prompt."""

    def __init__(self, recorder: EventRecorder, turn: int) -> None:
        self.recorder = recorder
        self.turn = turn
        self.tool_replies: dict[str, str] = {}  # native tool call id -> observation
        self.texts: list[str] = []  # plain-text protocol observations, sent as one user message

    def add(self, text: str, call_id: str | None, tool: str, extra: dict[str, Any] | None = None) -> None:
        self.recorder.emit(
            "observation",
            role="tool" if call_id is not None else "user",
            content=text,
            observation=text,
            turn=self.turn,
            tool_call={"id": call_id, "name": tool} if (call_id or tool) else None,
            data=extra or {},
        )
        if call_id is not None:
            self.tool_replies[call_id] = text
        else:
            self.texts.append(text)


def _speedup(result_dict: dict[str, Any], baseline: str = "eager") -> float | None:
    value = (result_dict.get("speedup") or {}).get(baseline)
    return float(value) if isinstance(value, int | float) else None


def run_rollout(
    task_source: str,
    client: ChatClient,
    *,
    config: RolloutConfig | None = None,
    sink: EventSink | None = None,
    evaluate_fn: EvaluateFn | None = None,
    cancel: Callable[[], bool] | None = None,
    rollout_id: str | None = None,
    start_seq: int = 0,
    count_tokens: TokenCounter = approx_tokens,
) -> RolloutSummary:
    """Run one multi-turn rollout on ``task_source`` and return its summary.

    Every step is emitted to ``sink`` (synchronously, in ``seq`` order) before the next one starts.
    ``evaluate_fn`` defaults to ``gpu_workers.evaluate``; ``cancel`` is polled before each turn and
    each evaluation.
    """
    config = config or RolloutConfig.for_evaluation()
    sink = sink if sink is not None else ListSink()
    rollout_id = rollout_id or uuid.uuid4().hex
    recorder = EventRecorder(rollout_id, sink, start_seq=start_seq)
    started = time.monotonic()
    tools = KernelTools(
        task_source,
        evaluate_fn=evaluate_fn,
        device=config.device,
        track=config.track,
        task_name=config.task_name,
        baselines=config.baselines,
        trials=config.trials,
        observation_limit=config.observation_limit,
        request_overrides=config.request_overrides,
    )
    system_text = system_prompt(track=config.track, device=config.device, tools=config.use_tools)
    if config.contrastive_variants:
        chosen = sample_contrastive(
            config.contrastive_variants, config.contrastive_k, rng=random.Random(config.seed)
        )
        task_text = contrastive_prompt(
            task_source, chosen, task_name=config.task_name, device=config.device, track=config.track
        )
    else:
        task_text = task_prompt(
            task_source, task_name=config.task_name, device=config.device, track=config.track
        )
    recorder.emit("system", role="system", content=system_text, data={"config": config.to_dict()})
    recorder.emit("user", role="user", content=task_text)

    policy = ContextPolicy(
        max_tokens=config.context_tokens - config.max_completion_tokens,
        keep_recent_turns=config.keep_recent_turns,
        count_tokens=count_tokens,
    )
    specs = tool_specs() if config.use_tools else None
    turns: list[TurnRecord] = []
    candidates: list[CandidateRecord] = []
    best: tuple[CandidateRecord, ToolResult] | None = None
    prompt_tokens = completion_tokens = 0
    invalid_streak = 0
    stop_reason = "max_turns"
    error = ""
    turn_no = 0

    def cancelled() -> bool:
        return bool(cancel is not None and cancel())

    for turn_no in range(1, config.max_turns + 1):
        if cancelled():
            stop_reason, turn_no = "cancelled", turn_no - 1
            break
        if config.max_wall_s is not None and time.monotonic() - started >= config.max_wall_s:
            stop_reason, turn_no = "wall_clock", turn_no - 1
            break
        if (
            config.max_total_tokens is not None
            and prompt_tokens + completion_tokens >= config.max_total_tokens
        ):
            stop_reason, turn_no = "token_budget", turn_no - 1
            break

        messages = policy.build(system_text, task_text, turns)
        try:
            completion: Completion = client.complete(
                messages, tools=specs, max_tokens=config.max_completion_tokens, temperature=config.temperature
            )
        except Exception as exc:  # any client failure ends the rollout cleanly, with its reason
            error = f"{type(exc).__name__}: {exc}"
            recorder.emit("error", role="system", content=error, turn=turn_no)
            stop_reason, turn_no = "llm_error", turn_no - 1
            break
        prompt_tokens += completion.prompt_tokens
        completion_tokens += completion.completion_tokens
        assistant_data: dict[str, Any] = {
            "finish_reason": completion.finish_reason,
            "context_level": policy.last_level,
            "prompt_messages": len(messages),
        }
        if completion.tool_calls:
            assistant_data["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in completion.tool_calls
            ]
        if completion.reasoning:
            assistant_data["reasoning"] = completion.reasoning  # recorded, never sent back to the model
        if config.record_token_ids and completion.completion_token_ids is not None:
            assistant_data["prompt_token_ids"] = completion.prompt_token_ids
            assistant_data["completion_token_ids"] = completion.completion_token_ids
        recorder.emit(
            "assistant",
            role="assistant",
            content=completion.text,
            turn=turn_no,
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            data=assistant_data,
        )

        parsed = parse_reply(completion, default_action=config.text_default_action)
        assistant_message: dict[str, Any] = {"role": "assistant", "content": completion.text}
        if parsed.native:
            assistant_message["tool_calls"] = [c.to_message() for c in completion.tool_calls]
        record = TurnRecord(index=turn_no, assistant=assistant_message)
        observations = _TurnObservations(recorder, turn_no)

        for problem in parsed.errors:
            observations.add(problem.message, problem.call_id, problem.tool, {"protocol_error": True})
            record.notes.append(f"protocol error: {problem.message.splitlines()[0][:120]}")

        succeeded = False
        for action in parsed.actions:
            if cancelled():
                stop_reason = "cancelled"
                break
            if config.max_wall_s is not None and time.monotonic() - started >= config.max_wall_s:
                stop_reason = "wall_clock"
                break
            recorder.emit(
                "tool_call",
                role="assistant",
                turn=turn_no,
                tool_call={"id": action.call_id, "name": action.tool, "args": {"source": action.source}},
            )
            outcome = tools.run(action.tool, action.source)
            result_dict = outcome.result.to_dict()
            speed = _speedup(result_dict)
            target_speed = _speedup(result_dict, config.target_baseline)
            accepted = (
                action.tool == "submit"
                and outcome.passed
                and (
                    config.target_speedup is None
                    or (target_speed is not None and target_speed >= config.target_speedup)
                )
            )
            observation = outcome.observation
            if action.tool == "submit" and outcome.passed and not accepted:
                shown = f"{target_speed:.3g}x" if target_speed is not None else "unmeasured"
                observation = (
                    f"Correct, but the speedup over {config.target_baseline} ({shown}) is below the "
                    f"target {config.target_speedup:.3g}x; keep optimising.\n{observation}"
                )
            recorder.emit(
                "evaluation",
                role="tool",
                turn=turn_no,
                evaluation=result_dict,
                reward=outcome.result.reward,
                tool_call={"id": action.call_id, "name": action.tool},
                data={
                    "tool": action.tool,
                    "kernel_source": action.source,
                    "kernel_hash": outcome.result.kernel_hash or _hash(action.source),
                    "cached": outcome.cached,
                    "accepted": accepted,
                    "evaluator_error": outcome.error,
                },
            )
            observations.add(observation, action.call_id, action.tool, {"status": outcome.result.status})
            if outcome.error:
                continue  # the evaluator failed, not the kernel: nothing to rank
            cand = CandidateRecord(
                turn=turn_no,
                tool=action.tool,
                source=action.source,
                kernel_hash=_hash(action.source),
                status=outcome.result.status,
                correct=outcome.result.correct,
                reward=float(outcome.result.reward),
                speedup=speed,
            )
            record.candidates.append(cand)
            candidates.append(cand)
            if best is None or cand.rank_key() > best[0].rank_key():
                best = (cand, outcome)
            if accepted:
                succeeded = True
                break

        if parsed.native:
            # every tool call needs an answer, in order, even the ones we skipped
            for call in completion.tool_calls:
                record.observations.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": observations.tool_replies.get(
                            call.id, "not run: the rollout stopped before this call"
                        ),
                    }
                )
            if observations.texts:
                record.observations.append({"role": "user", "content": "\n\n".join(observations.texts)})
        else:
            record.observations.append({"role": "user", "content": "\n\n".join(observations.texts)})
        turns.append(record)

        if succeeded:
            stop_reason = "success"
            break
        if stop_reason in ("cancelled", "wall_clock"):
            break
        invalid_streak = 0 if parsed.actions else invalid_streak + 1
        if invalid_streak >= config.max_consecutive_invalid:
            stop_reason = "no_progress"
            break
    else:
        stop_reason = "max_turns"

    summary = RolloutSummary(
        rollout_id=rollout_id,
        stop_reason=stop_reason,
        turns=turn_no,
        evaluations=tools.evaluations,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        elapsed_s=round(time.monotonic() - started, 3),
        task_name=config.task_name,
        candidates=[
            {
                "turn": c.turn,
                "tool": c.tool,
                "kernel_hash": c.kernel_hash,
                "status": c.status,
                "reward": c.reward,
                "speedup": c.speedup,
            }
            for c in candidates
        ],
        error=error,
    )
    if best is not None:
        cand, outcome = best
        summary.best_kernel = cand.source
        summary.best_evaluation = outcome.result.to_dict()
        summary.best_reward = cand.reward
        summary.best_speedup = cand.speedup
        summary.best_turn = cand.turn
        summary.passed = cand.status == "passed"
    summary.last_seq = recorder.next_seq  # the summary event's own seq
    recorder.emit(
        "summary",
        role="system",
        content=summary.headline(),
        turn=turn_no,
        reward=summary.best_reward,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        data=summary.to_dict(),
    )
    return summary


def _hash(source: str) -> str:
    from gpu_workers.schema import source_hash

    return source_hash(source)


def summary_json(summary: RolloutSummary) -> str:
    return json.dumps({"summary": summary.to_dict()}, sort_keys=True, default=str)
