"""Token bookkeeping of multi-turn rollouts: masks, spans, per-turn credit on tokens."""

import torch

from training.data import synthetic_tasks
from training.evaluation import SyntheticScorer, TurnOutcome
from training.policy import ByteTokenizer, ModelSpec, PolicyGenerator, Sampling, build_model
from training.prompting import PromptSettings
from training.recipes import AlgoConfig
from training.rollout import CollectSettings, Rollout, RolloutCollector, Turn
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
        PolicyGenerator(model, tok), tok, SyntheticScorer(ord("a"), tok.eos_token_id),
        sampling=Sampling(max_new_tokens=6), prompts=PromptSettings(style="short"),
        settings=CollectSettings(group_size=2, max_turns=3, max_context=128))
    rollouts = collector.collect(synthetic_tasks(1))
    for r in rollouts:
        assert len(r.turns) == 3 and r.turns[-1].observation_ids == []
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
        PolicyGenerator(model, tok), tok, SyntheticScorer(ord("a"), tok.eos_token_id),
        sampling=Sampling(max_new_tokens=16), prompts=PromptSettings(style="short"),
        settings=CollectSettings(group_size=1, max_turns=5, max_context=40))
    (r,) = collector.collect(synthetic_tasks(1))
    assert len(r.token_ids()) <= 40
    assert len(r.turns) < 5
