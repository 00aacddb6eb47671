"""Rollout collection: G rollouts per task, token in / token out, multi-turn with observations.

A rollout's token sequence is ``prompt + action_1 + observation_1 + action_2 + …``: each turn is
generated from the exact ids of everything before it (no re-templating), and only the action ids
are the policy's (``action_mask``): prompts and observations are masked out of every loss.
Each turn's reward comes from a scorer (the evaluator or a synthetic reward); the evaluations of a
turn run concurrently, bounded by the evaluator pool, each with a timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from training.data import TrainingTask
from training.evaluation import Scorer, TurnOutcome, wait_outcomes
from training.policy import Generator, Sampling, Tokenizer
from training.prompting import PromptSettings, build_prompt, render_observation


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
        """The rollout's score: its best turn (the best kernel it produced)."""
        return max(self.turn_rewards) if self.turns else 0.0

    @property
    def response_length(self) -> int:
        return sum(len(t.action_ids) for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task_name, "group": self.group, "index": self.index,
                "reward": self.outcome_reward, "turns": [t.to_dict() for t in self.turns]}


@dataclass
class CollectSettings:
    group_size: int = 4
    max_turns: int = 1
    stop_on_pass: bool = False  # end a rollout at its first passing turn
    eval_timeout_s: float = 600.0
    max_context: int = 512
    min_room: int = 8  # end a rollout when fewer tokens than this are left in the context
    generation_batch: int = 64


class RolloutCollector:
    def __init__(self, generator: Generator, tokenizer: Tokenizer, scorer: Scorer, *,
                 sampling: Sampling, settings: CollectSettings, prompts: PromptSettings) -> None:
        self.generator = generator
        self.tokenizer = tokenizer
        self.scorer = scorer
        self.sampling = sampling
        self.settings = settings
        self.prompts = prompts

    def collect(self, tasks: Sequence[TrainingTask],
                variants_for: Callable[[TrainingTask], list[dict[str, Any]]] | None = None) -> list[Rollout]:
        s = self.settings
        rollouts: list[Rollout] = []
        task_of: list[TrainingTask] = []
        for g, task in enumerate(tasks):
            system, user = build_prompt(task, self.prompts, variants_for(task) if variants_for else None)
            prompt = self.tokenizer.prompt_ids(system, user)
            for k in range(s.group_size):
                rollouts.append(Rollout(task_name=task.name, group=g, index=k, prompt_ids=list(prompt)))
                task_of.append(task)
        contexts = [r.token_ids() for r in rollouts]
        active = [i for i in range(len(rollouts)) if len(contexts[i]) + s.min_room <= s.max_context]
        for turn_no in range(s.max_turns):
            if not active:
                break
            budget = min(self.sampling.max_new_tokens, s.max_context - max(len(contexts[i]) for i in active))
            sampling = Sampling(temperature=self.sampling.temperature, top_p=self.sampling.top_p,
                                max_new_tokens=budget)
            responses: list[list[int]] = []
            for start in range(0, len(active), s.generation_batch):
                chunk = active[start : start + s.generation_batch]
                responses += self.generator.generate([contexts[i] for i in chunk], sampling)
            texts = [self.tokenizer.decode(r) for r in responses]
            futures = [self.scorer.submit(task_of[i], text, ids) for i, text, ids in zip(active, texts, responses)]
            outcomes = wait_outcomes(futures, timeout_s=s.eval_timeout_s, floor=self.scorer.floor)
            still = []
            for i, ids, text, outcome in zip(active, responses, texts, outcomes):
                turn = Turn(action_ids=list(ids), text=text, outcome=outcome)
                rollouts[i].turns.append(turn)
                contexts[i] += turn.action_ids
                done = turn_no + 1 >= s.max_turns or (s.stop_on_pass and outcome.status == "passed")
                if done:
                    continue
                turn.observation = render_observation(outcome)
                turn.observation_ids = self.tokenizer.observation_ids(turn.observation)
                contexts[i] += turn.observation_ids
                if len(contexts[i]) + s.min_room <= s.max_context:
                    still.append(i)
                else:  # no room for another turn: drop the observation nobody will answer
                    contexts[i] = contexts[i][: len(contexts[i]) - len(turn.observation_ids)]
                    turn.observation_ids, turn.observation = [], ""
            active = still
        return rollouts
