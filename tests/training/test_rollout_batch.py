"""Token bookkeeping of multi-turn rollouts in the agent's environment: masks, spans, per-rollout
budgets, parts after the context policy condenses, per-turn credit on tokens."""

import torch

from training.data import TrainingTask, synthetic_tasks
from training.generation import GenerationOutput, PolicyBackend
from training.policy import ByteTokenizer, ModelSpec, PolicyGenerator, build_model
from training.recipes import AlgoConfig
from training.rollout import (
    CollectSettings,
    Rollout,
    RolloutCollector,
    SyntheticEnvironment,
    Turn,
    TurnOutcome,
    render_messages,
)
from training.trainer import batch_from_rollouts, grpo_token_advantages, ppo_token_rewards


def two_turn(rewards, index):
    r = Rollout(task_name="t", group=0, index=index, prompt_ids=[1, 2])
    r.turns = [Turn(action_ids=[3, 4], text="", outcome=TurnOutcome(rewards[0], "synthetic"), observation_ids=[5]),
               Turn(action_ids=[6], text="", outcome=TurnOutcome(rewards[1], "synthetic"))]
    return r


def test_sequence_masks_and_spans():
    r = two_turn([1.0, 0.0], 0)
    assert r.token_ids() == [1, 2, 3, 4, 5, 6]
    assert r.action_mask() == [0, 0, 1, 1, 0, 1]
    assert r.turn_spans() == [(2, 4), (5, 6)]
    batch = batch_from_rollouts([r], pad_id=0)
    # position t predicts token t+1
    assert batch.action_mask.tolist() == [[0.0, 1.0, 1.0, 0.0, 1.0]]
    assert batch.turn_ends == [[2, 4]]


def test_discounted_turn_credit_on_tokens():
    rollouts = [two_turn([1.0, 0.0], 0), two_turn([0.0, 2.0], 1)]
    batch = batch_from_rollouts(rollouts, pad_id=0)
    algo = AlgoConfig(turn_credit="discounted", turn_gamma=0.5, scale_rewards_by_std=False)
    # returns: (1.0, 0.0) and (0 + 0.5*2 = 1.0, 2.0); mean 1.0 → advantages (0, −1), (0, 1)
    adv = grpo_token_advantages(rollouts, batch, algo)
    assert adv.tolist() == [[0.0, 0.0, 0.0, 0.0, -1.0], [0.0, 0.0, 0.0, 0.0, 1.0]]
    outcome = grpo_token_advantages(rollouts, batch, AlgoConfig(scale_rewards_by_std=False))
    assert outcome.tolist() == [[0.0, -0.5, -0.5, 0.0, -0.5], [0.0, 0.5, 0.5, 0.0, 0.5]]  # best turns 1, 2
    assert ppo_token_rewards(rollouts, batch, algo).tolist()[1] == [0.0, 0.0, 0.0, 0.0, 2.0]
    assert ppo_token_rewards(rollouts, batch, AlgoConfig()).tolist()[0] == [0.0, 0.0, 0.0, 0.0, 1.0]


def test_multi_turn_collection_appends_ids_without_retemplating():
    tok = ByteTokenizer()
    model = build_model(ModelSpec(max_positions=128), tok, seed=0)
    torch.manual_seed(0)
    collector = RolloutCollector(
        PolicyBackend(PolicyGenerator(model, tok), tok.eos_token_id), tok,
        SyntheticEnvironment(ord("a"), tok.eos_token_id),
        settings=CollectSettings(group_size=2, max_turns=3, max_new_tokens=6, max_context=128))
    rollouts = collector.collect(synthetic_tasks(1))
    for r in rollouts:
        assert len(r.turns) == 3 and r.turns[-1].observation_ids == [] and r.part == 0
        ids = list(r.prompt_ids)
        for t in r.turns[:-1]:
            ids += t.action_ids
            assert t.observation_ids[0] == tok.special["<|observation|>"]
            assert t.observation.startswith("status: synthetic")
            ids += t.observation_ids
        assert r.token_ids() == ids + r.turns[-1].action_ids
        assert sum(r.action_mask()) == r.response_length


def test_context_limit_ends_rollouts():
    tok = ByteTokenizer()
    model = build_model(ModelSpec(max_positions=40), tok, seed=0)
    collector = RolloutCollector(
        PolicyBackend(PolicyGenerator(model, tok), tok.eos_token_id), tok,
        SyntheticEnvironment(ord("a"), tok.eos_token_id),
        settings=CollectSettings(group_size=1, max_turns=5, max_new_tokens=16, max_context=40))
    (r,) = collector.collect(synthetic_tasks(1))
    assert len(r.token_ids()) <= 40
    assert len(r.turns) < 5 and r.stop_reason == "token_budget"


class LengthBackend:
    """Answers every prompt with ``lengths[key]`` copies of token 97 (never an end-of-turn), so each
    reply is exactly as long as its own budget allows; records every batch."""

    def __init__(self, want):
        self.want = want
        self.calls = []

    def generate(self, requests, *, temperature, top_p):
        self.calls.append([r.max_new_tokens for r in requests])
        return [GenerationOutput(token_ids=[97] * min(self.want, r.max_new_tokens), finish_reason="length")
                for r in requests]

    def sync_weights(self, model, step):
        pass


def test_each_rollout_has_its_own_generation_budget():
    # given: two tasks whose prompts differ in length by 20 tokens, a 45-token context, 30-token turns
    tok = ByteTokenizer()
    backend = LengthBackend(want=30)
    tasks = [TrainingTask("a", "# short\n"), TrainingTask("b" * 21, "# long\n")]
    collector = RolloutCollector(backend, tok, SyntheticEnvironment(ord("a"), tok.eos_token_id),
                                 settings=CollectSettings(group_size=1, max_turns=1, max_new_tokens=30,
                                                          max_context=45))

    # when: both are collected in one batch
    short, long = collector.collect(tasks)

    # then: each got min(30, room in its own context); the long prompt did not cut the short one's turn
    assert len(long.prompt_ids) == len(short.prompt_ids) + 20
    assert backend.calls == [[30, 45 - len(long.prompt_ids)]] == [[30, 15]]
    assert len(short.turns[0].action_ids) == 30
    assert len(long.turns[0].action_ids) == 15


def test_render_messages_matches_the_incremental_format():
    tok = ByteTokenizer()
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": "A"}, {"role": "user", "content": "O"}]
    assert render_messages(tok, messages) == (
        tok.prompt_ids("S", "U") + tok.encode("A") + [tok.eos_token_id] + tok.observation_ids("O"))


def test_each_rollout_spends_its_own_token_budget():
    # given: the agent's environment, two episodes of one task; the first writes a long reply
    from agent.prompts import system_prompt, task_prompt
    from gpu_workers.reward import resolve_reward_config
    from gpu_workers.workers.pool import LocalPool
    from training.policy import ScriptedGenerator
    from training.rollout import AgentEnvironment

    tok = ByteTokenizer()
    task = TrainingTask("t", "import torch\n# a task\n")
    prompt = len(tok.prompt_ids(system_prompt(track="open", device="cpu"),
                                task_prompt(task.task_source, task_name="t", device="cpu", track="open")))
    short, long = "No code yet.", "No code yet. " + "x" * 500
    budget = prompt + len(short) + 2 + 100  # room for one short turn and a bit, never for the long one
    with LocalPool(workers=1) as pool:  # never asked: no reply carries a kernel
        env = AgentEnvironment(pool=pool, reward_config=resolve_reward_config("cuda_agent_levels"),
                               device="cpu", track="open")
        collector = RolloutCollector(
            PolicyBackend(ScriptedGenerator(tok, lambda p, i: long if i == 0 else short), tok.eos_token_id),
            tok, env, settings=CollectSettings(group_size=2, max_turns=5, max_new_tokens=600, max_context=8192,
                                               max_rollout_tokens=budget))

        # when: both are collected together
        first, second = collector.collect([task])

    # then: the long episode stopped after its own first turn; the other went on with its budget
    assert (len(first.turns), first.stop_reason) == (1, "token_budget")
    assert (len(second.turns), second.stop_reason) == (2, "token_budget")
    assert [t.outcome.status for t in second.turns] == ["format_error", "format_error"]
    assert second.turns[0].observation.startswith("No candidate found")


def test_a_condensed_context_starts_a_new_part_of_the_same_episode():
    # given: a context that holds two turns of the agent's conversation but not three
    from agent.prompts import system_prompt, task_prompt
    from gpu_workers.reward import resolve_reward_config
    from gpu_workers.workers.pool import LocalPool
    from training.metrics import rollout_metrics
    from training.policy import ScriptedGenerator
    from training.rollout import AgentEnvironment

    tok = ByteTokenizer()
    task = TrainingTask("t", "import torch\n# a task\n")
    prompt = len(tok.prompt_ids(system_prompt(track="open", device="cpu"),
                                task_prompt(task.task_source, task_name="t", device="cpu", track="open")))
    reply = "No code yet. " + "y" * 80
    with LocalPool(workers=1) as pool:  # never asked: no reply carries a kernel
        env = AgentEnvironment(pool=pool, reward_config=resolve_reward_config("cuda_agent_levels"),
                               device="cpu", track="open", keep_recent_turns=1)
        collector = RolloutCollector(
            PolicyBackend(ScriptedGenerator(tok, lambda p, i: reply), tok.eos_token_id), tok, env,
            settings=CollectSettings(group_size=1, max_turns=3, max_new_tokens=100, max_context=prompt + 430))

        # when: the episode runs three turns
        parts = collector.collect([task])

    # then: turns 1-2 are one sequence; the agent's context policy condensed turn 1 for turn 3, so
    # turn 3 is a second part whose prompt carries the progress summary (all of it masked out)
    assert [(p.group, p.index, p.part, len(p.turns)) for p in parts] == [(0, 0, 0, 2), (0, 0, 1, 1)]
    first, second = parts
    assert first.turns[0].observation_ids == tok.observation_ids(first.turns[0].observation)
    assert first.turns[1].observation_ids == []  # it is part of the next part's prompt instead
    assert "Progress so far" in tok.decode(second.prompt_ids)
    assert [sum(p.action_mask()) for p in parts] == [p.response_length for p in parts]
    assert all(len(p.token_ids()) <= prompt + 430 for p in parts)
    assert first.outcome_reward == second.outcome_reward == -1.0
    assert rollout_metrics(parts)["num_rollouts"] == 1 and rollout_metrics(parts)["turns_mean"] == 3
