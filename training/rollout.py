"""Rollout collection in the agent's own environment, token in / token out.

Every training rollout is a run of ``agent.loop.run_rollout``: the same prompts, tools (compile,
verify, profile, submit), observations (``agent.tools``), reply protocol with its ``ACTION:`` lines
(``agent.protocol``) and context policy (``agent.context``) as an evaluation. Only the model client
differs: :class:`TokenClient` turns the loop's messages into token ids and asks a generation
backend (``training.generation``) for the continuation, so the policy's sampled ids are recorded
exactly and never re-tokenised.

Token bookkeeping. While the context policy sends the conversation in full, each new prompt is the
previous prompt + the sampled ids + the observation's ids (``Tokenizer.observation_ids``): one
sequence, ``prompt + action_1 + observation_1 + action_2 + …``, whose ``action_mask`` is 1 on the
policy's ids only. When the context policy condenses earlier turns, the prompt is no longer an
extension of what the model saw before, so a new *part* begins: a new sequence, rendered from the
messages in the same format (earlier replies in it are context, masked out). Each part is one
:class:`Rollout` (same ``group`` and ``index``, increasing ``part``) carrying the whole episode's
reward as its outcome.

Budgets are per rollout: every generation request asks for ``min(max_new_tokens, room left in that
rollout's context)``; a long rollout never shortens another one's turn.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.events import ListSink, TrajectoryEvent
from agent.llm import Completion
from agent.loop import RolloutConfig, run_rollout
from agent.prompts import Variant
from gpu_workers import EvalRequest, EvalResult
from training.data import TrainingTask
from training.generation import GenerationBackend, GenerationBatcher, GenerationRequest
from training.policy import Tokenizer


@dataclass
class TurnOutcome:
    reward: float
    status: str  # an evaluator status, or "format_error", "timeout", "eval_error", "synthetic"
    result: dict[str, Any] | None = None  # EvalResult.to_dict()
    error: str = ""
    latency_s: float = 0.0
    timed_out: bool = False
    tool: str = ""  # the agent tool that ran (compile, verify, profile, submit)
    kernel_source: str = ""  # the candidate the tool evaluated

    def to_dict(self) -> dict[str, Any]:
        return {"reward": self.reward, "status": self.status, "result": self.result, "error": self.error,
                "latency_s": self.latency_s, "timed_out": self.timed_out, "tool": self.tool,
                "kernel_source": self.kernel_source}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TurnOutcome:
        return cls(**data)


@dataclass
class Turn:
    action_ids: list[int]
    text: str
    outcome: TurnOutcome
    observation_ids: list[int] = field(default_factory=list)  # appended after this turn's action
    observation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "observation": self.observation, "reward": self.outcome.reward,
                "status": self.outcome.status, "outcome": self.outcome.to_dict(),
                "action_tokens": len(self.action_ids)}


@dataclass
class Rollout:
    task_name: str
    group: int  # index of the task within the step: rollouts of one group share a prompt
    index: int  # index within the group
    prompt_ids: list[int]
    turns: list[Turn] = field(default_factory=list)
    part: int = 0  # > 0: a later part of the same episode, after the context policy condensed it
    episode_reward: float | None = None  # the whole episode's best reward (None: this part's own)
    reward_floor: float = 0.0  # what a failed turn scores: credit is measured above it
    stop_reason: str = ""

    def token_ids(self) -> list[int]:
        ids = list(self.prompt_ids)
        for t in self.turns:
            ids += t.action_ids + t.observation_ids
        return ids

    def action_mask(self) -> list[int]:
        """1 where the token was sampled by the policy, aligned with ``token_ids()``."""
        mask = [0] * len(self.prompt_ids)
        for t in self.turns:
            mask += [1] * len(t.action_ids) + [0] * len(t.observation_ids)
        return mask

    def turn_spans(self) -> list[tuple[int, int]]:
        """[start, end) of each turn's action ids within ``token_ids()``."""
        spans, pos = [], len(self.prompt_ids)
        for t in self.turns:
            spans.append((pos, pos + len(t.action_ids)))
            pos += len(t.action_ids) + len(t.observation_ids)
        return spans

    @property
    def turn_rewards(self) -> list[float]:
        return [t.outcome.reward for t in self.turns]

    @property
    def outcome_reward(self) -> float:
        """The episode's score: its best turn (the best kernel it produced)."""
        if self.episode_reward is not None:
            return self.episode_reward
        return max(self.turn_rewards) if self.turns else self.reward_floor

    @property
    def response_length(self) -> int:
        return sum(len(t.action_ids) for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task_name, "group": self.group, "index": self.index, "part": self.part,
                "reward": self.outcome_reward, "stop_reason": self.stop_reason,
                "turns": [t.to_dict() for t in self.turns]}


@dataclass
class CollectSettings:
    group_size: int = 4
    max_turns: int = 1
    max_new_tokens: int = 64  # per turn, before the context's own limit
    max_context: int = 512  # tokens of one sequence (prompt + every turn so far)
    min_room: int = 8  # end a rollout when fewer tokens than this are left for a reply
    temperature: float = 1.0
    top_p: float = 1.0
    max_rollout_tokens: int | None = None  # prompt + reply tokens over one rollout (agent's max_total_tokens)


class ContextFull(RuntimeError):
    """No room is left in the rollout's context for another reply."""


# -------------------------------------------------------------------------------------------------
# The model client: messages in, token ids through the backend, a Completion out


@dataclass
class _Part:
    prompt_ids: list[int]
    actions: list[list[int]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    observations: list[tuple[list[int], str]] = field(default_factory=list)  # after action k (not the last)
    turn_numbers: list[int] = field(default_factory=list)


def render_messages(tokenizer: Tokenizer, messages: Sequence[dict[str, Any]]) -> list[int]:
    """A whole conversation as ids in the rollout format: the first system/user pair as the prompt,
    then every assistant reply as its ids + end-of-turn, every answer to it as observation ids."""
    has_system = bool(messages) and messages[0].get("role") == "system"
    system = (messages[0].get("content") or "") if has_system else ""
    rest = list(messages[1:] if has_system else messages)
    if not rest or rest[0].get("role") != "user":
        raise ValueError("a conversation must start with the system prompt and a user message")
    ids = tokenizer.prompt_ids(system, rest[0].get("content") or "")
    pending: list[str] = []
    for message in rest[1:]:
        if message.get("role") == "assistant":
            if pending:
                ids += tokenizer.observation_ids("\n\n".join(pending))
                pending = []
            ids += tokenizer.encode(message.get("content") or "") + [tokenizer.eos_token_id]
        else:
            pending.append(message.get("content") or "")
    if pending:
        ids += tokenizer.observation_ids("\n\n".join(pending))
    return ids


class TokenClient:
    """An ``agent.llm.ChatClient`` for one training rollout (see the module docstring)."""

    def __init__(self, key: int, batcher: GenerationBatcher, tokenizer: Tokenizer, *, max_context: int,
                 min_room: int) -> None:
        self.key = key
        self.batcher = batcher
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.min_room = min_room
        self.parts: list[_Part] = []
        self._sent: list[dict[str, Any]] | None = None
        self._ids: list[int] = []  # the current part's ids up to and including the last reply
        self.turn = 0

    def _extends(self, messages: list[dict[str, Any]]) -> bool:
        sent = self._sent
        if sent is None or len(messages) <= len(sent) + 1 or messages[: len(sent)] != sent:
            return False
        reply = messages[len(sent)]
        return reply.get("role") == "assistant" and reply.get("content") == self.parts[-1].texts[-1]

    def complete(self, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                 max_tokens: int = 4096, temperature: float = 1.0) -> Completion:
        if tools:
            raise ValueError("training rollouts use the plain-text protocol (use_tools=False)")
        if self._extends(messages):
            observation = "\n\n".join(m.get("content") or "" for m in messages[len(self._sent or []) + 1 :])
            obs_ids = self.tokenizer.observation_ids(observation)
            self.parts[-1].observations.append((obs_ids, observation))
            prompt = self._ids + obs_ids
        else:
            prompt = render_messages(self.tokenizer, messages)
            self.parts.append(_Part(prompt_ids=list(prompt)))
        budget = min(max_tokens, self.max_context - len(prompt))
        if budget < min(self.min_room, max_tokens):
            if self.parts[-1].observations and len(self.parts[-1].observations) == len(self.parts[-1].actions):
                self.parts[-1].observations.pop()  # nobody will answer it
            if not self.parts[-1].actions:
                self.parts.pop()
            raise ContextFull(f"{len(prompt)} of {self.max_context} context tokens used")
        out = self.batcher.request(self.key, GenerationRequest(prompt_ids=prompt, max_new_tokens=budget))
        ids = list(out.token_ids)
        text = self.tokenizer.decode(ids)
        self.turn += 1
        part = self.parts[-1]
        part.actions.append(ids)
        part.texts.append(text)
        part.turn_numbers.append(self.turn)
        self._ids = prompt + ids
        self._sent = [dict(m) for m in messages]
        return Completion(text=text, prompt_tokens=len(prompt), completion_tokens=len(ids),
                          finish_reason=out.finish_reason, prompt_token_ids=prompt, completion_token_ids=ids)


# -------------------------------------------------------------------------------------------------
# Environments


class EvaluationTimeout(TimeoutError):
    pass


@dataclass
class AgentEnvironment:
    """The agent's loop with the evaluator as its tools, through a pool (``gpu_workers.workers.pool``).

    ``reward_config`` (a ``gpu_workers.reward`` config) goes on every request, so the evaluator's
    own ``reward`` is the training reward. ``no_candidate_reward`` scores a reply that the protocol
    could not use and ``failure_reward`` an evaluation that timed out or crashed (both default to
    the config's floor): training-only shaping, as data.
    """

    pool: Any  # submit(EvalRequest) -> Future[EvalResult]
    reward_config: dict[str, Any]
    device: str = "cpu"
    track: str = "strict"
    request: dict[str, Any] = field(default_factory=dict)  # extra EvalRequest fields (trials, baselines…)
    timeout_s: float = 600.0
    target_speedup: float | None = None
    target_baseline: str = "compile"
    keep_recent_turns: int = 4
    observation_limit: int = 4096
    contrastive_k: int = 4
    no_candidate_reward: float | None = None
    failure_reward: float | None = None

    @property
    def floor(self) -> float:
        return float(self.reward_config.get("floor", 0.0))

    def _evaluate_fn(self, latencies: dict[str, float]) -> Callable[[EvalRequest], EvalResult]:
        def evaluate(request: EvalRequest) -> EvalResult:
            started = time.monotonic()
            future = self.pool.submit(request)
            try:
                result = future.result(timeout=self.timeout_s)
            except cf.TimeoutError:
                future.cancel()
                raise EvaluationTimeout(f"evaluation did not finish within {self.timeout_s:g} s") from None
            finally:
                latencies[request.kernel_hash] = time.monotonic() - started
            return result if isinstance(result, EvalResult) else EvalResult.from_dict(result)

        return evaluate

    def rollout_config(self, task: TrainingTask, settings: CollectSettings, variants: list[Variant],
                       seed: int) -> RolloutConfig:
        request = dict(self.request)
        baselines = tuple(request.pop("baselines", ("eager", "compile")))
        trials = int(request.pop("trials", 5))
        request["reward_config"] = self.reward_config
        return RolloutConfig.for_training(
            max_turns=settings.max_turns, context_tokens=settings.max_context,
            max_completion_tokens=min(settings.max_new_tokens, settings.max_context - 1),
            max_total_tokens=settings.max_rollout_tokens,
            temperature=settings.temperature, device=self.device, track=self.track, task_name=task.name,
            baselines=baselines, trials=trials, target_speedup=self.target_speedup,
            target_baseline=self.target_baseline, keep_recent_turns=self.keep_recent_turns,
            observation_limit=self.observation_limit, contrastive_variants=variants,
            contrastive_k=self.contrastive_k, seed=seed, request_overrides=request,
            )

    def run(self, task: TrainingTask, client: TokenClient, settings: CollectSettings,
            variants: list[Variant], seed: int) -> tuple[dict[int, TurnOutcome], str]:
        """Run one episode; (turn number → outcome, stop reason)."""
        sink = ListSink()
        latencies: dict[str, float] = {}
        count = client.tokenizer.encode
        summary = run_rollout(task.task_source, client, config=self.rollout_config(task, settings, variants, seed),
                              sink=sink, evaluate_fn=self._evaluate_fn(latencies),
                              count_tokens=lambda text: len(count(text)))
        if summary.stop_reason == "llm_error" and not summary.error.startswith(ContextFull.__name__):
            raise RuntimeError(f"generation failed in a training rollout: {summary.error}")
        return self.outcomes(sink.events, latencies), summary.stop_reason

    def outcomes(self, events: Sequence[TrajectoryEvent], latencies: dict[str, float]) -> dict[int, TurnOutcome]:
        no_candidate = self.floor if self.no_candidate_reward is None else self.no_candidate_reward
        failure = self.floor if self.failure_reward is None else self.failure_reward
        out: dict[int, TurnOutcome] = {}
        for event in events:
            if event.kind == "observation" and event.data.get("protocol_error") and event.turn not in out:
                out[event.turn] = TurnOutcome(reward=no_candidate, status="format_error", error=event.content)
            if event.kind != "evaluation":
                continue
            data, tool = event.data, str(event.data.get("tool", ""))
            source = str(data.get("kernel_source") or "")
            latency = latencies.get(str(data.get("kernel_hash")), 0.0)
            error = str(data.get("evaluator_error") or "")
            if error:
                timed_out = f"{EvaluationTimeout.__name__}: " in error
                outcome = TurnOutcome(reward=failure, status="timeout" if timed_out else "eval_error",
                                      error=error, latency_s=latency, timed_out=timed_out, tool=tool,
                                      kernel_source=source)
            else:
                result = event.evaluation or {}
                outcome = TurnOutcome(reward=float(event.reward or 0.0), status=str(result.get("status")),
                                      result=result, latency_s=0.0 if data.get("cached") else latency, tool=tool,
                                      kernel_source=source)
            best = out.get(event.turn)
            if best is None or best.status == "format_error" or outcome.reward > best.reward:
                out[event.turn] = outcome
        return out


@dataclass
class SyntheticEnvironment:
    """A toy environment for learning tests: reward = share of the reply's tokens (end-of-turn
    excluded) equal to ``target_id``; the observation is the reward. No tools, no evaluator."""

    target_id: int
    eos_id: int
    floor: float = 0.0

    def run(self, task: TrainingTask, client: TokenClient, settings: CollectSettings,
            variants: list[Variant], seed: int) -> tuple[dict[int, TurnOutcome], str]:
        messages: list[dict[str, Any]] = [{"role": "system", "content": ""},
                                          {"role": "user", "content": f"Task {task.name}:"}]
        out: dict[int, TurnOutcome] = {}
        for turn in range(1, settings.max_turns + 1):
            try:
                completion = client.complete(messages, max_tokens=settings.max_new_tokens,
                                             temperature=settings.temperature)
            except ContextFull:
                return out, "token_budget"
            body = [i for i in completion.completion_token_ids or [] if i != self.eos_id]
            reward = sum(1 for i in body if i == self.target_id) / len(body) if body else 0.0
            out[turn] = TurnOutcome(reward=reward, status="synthetic")
            messages = messages + [{"role": "assistant", "content": completion.text},
                                   {"role": "user", "content": f"status: synthetic\nreward: {reward:.3f}"}]
        return out, "max_turns"


# -------------------------------------------------------------------------------------------------
# Collection


class RolloutCollector:
    """``group_size`` episodes per task, all in flight together: one thread each, their generation
    requests batched (``GenerationBatcher``), their evaluations concurrent up to the pool's size."""

    def __init__(self, backend: GenerationBackend, tokenizer: Tokenizer, environment: Any, *,
                 settings: CollectSettings, seed: int = 0) -> None:
        if settings.max_new_tokens >= settings.max_context:
            raise ValueError("max_new_tokens must be smaller than max_context")
        self.backend = backend
        self.tokenizer = tokenizer
        self.environment = environment
        self.settings = settings
        self.seed = seed

    def collect(self, tasks: Sequence[TrainingTask],
                variants_for: Callable[[TrainingTask], list[Variant]] | None = None) -> list[Rollout]:
        s = self.settings
        batcher = GenerationBatcher(self.backend, temperature=s.temperature, top_p=s.top_p)
        jobs = [(g, k, task) for g, task in enumerate(tasks) for k in range(s.group_size)]
        clients = [TokenClient(n, batcher, self.tokenizer, max_context=s.max_context, min_room=s.min_room)
                   for n in range(len(jobs))]
        batcher.register(range(len(jobs)))
        results: list[tuple[dict[int, TurnOutcome], str] | BaseException | None] = [None] * len(jobs)
        variants = {g: (variants_for(task) if variants_for else []) for g, task in enumerate(tasks)}

        def episode(n: int) -> None:
            g, k, task = jobs[n]
            try:
                results[n] = self.environment.run(task, clients[n], s, variants[g], self.seed * 7919 + n)
            except BaseException as exc:  # re-raised below, in the caller's thread
                results[n] = exc
            finally:
                batcher.finish(n)

        threads = [threading.Thread(target=episode, args=(n,), name=f"rollout-{n}", daemon=True)
                   for n in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rollouts: list[Rollout] = []
        for n, (g, k, task) in enumerate(jobs):
            result = results[n]
            if isinstance(result, BaseException):
                raise result
            assert result is not None
            outcomes, stop = result
            rollouts += self._assemble(task, g, k, clients[n], outcomes, stop)
        return rollouts

    def _assemble(self, task: TrainingTask, group: int, index: int, client: TokenClient,
                  outcomes: dict[int, TurnOutcome], stop: str) -> list[Rollout]:
        floor = float(self.environment.floor)
        parts: list[Rollout] = []
        for number, part in enumerate(client.parts):
            rollout = Rollout(task_name=task.name, group=group, index=index, prompt_ids=list(part.prompt_ids),
                              part=number, reward_floor=floor, stop_reason=stop)
            for i, (ids, text, turn_no) in enumerate(zip(part.actions, part.texts, part.turn_numbers)):
                outcome = outcomes.get(turn_no, TurnOutcome(reward=floor, status="format_error",
                                                            error="the turn produced no evaluation"))
                obs_ids, obs_text = part.observations[i] if i < len(part.observations) else ([], "")
                if i == len(part.actions) - 1:
                    obs_ids, obs_text = [], ""  # the observations of a part's last reply start the next part
                rollout.turns.append(Turn(action_ids=list(ids), text=text, outcome=outcome,
                                          observation_ids=list(obs_ids), observation=obs_text))
            parts.append(rollout)
        episode = max((t.outcome.reward for p in parts for t in p.turns), default=floor)
        for p in parts:
            p.episode_reward = episode
        return parts
