import pytest
import torch

from training.advantages import (
    discounted_turn_returns,
    gae,
    grpo_advantages,
    grpo_turn_advantages,
    masked_gae,
    masked_whiten,
)


def test_discounted_turn_returns_kevin_gamma():
    # G2 = 2; G1 = 0 + 0.4*2 = 0.8; G0 = 1 + 0.4*0.8 = 1.32
    assert discounted_turn_returns([1.0, 0.0, 2.0], 0.4) == pytest.approx([1.32, 0.8, 2.0])
    assert discounted_turn_returns([], 0.4) == []


def test_grpo_advantages_normalised_by_population_std():
    # mean 2.5, centred (-1.5, -0.5, 0.5, 1.5), population std sqrt(1.25) = 1.118034
    adv = grpo_advantages([1.0, 2.0, 3.0, 4.0])
    assert adv == pytest.approx([-1.341641, -0.447214, 0.447214, 1.341641], abs=1e-5)


def test_dr_grpo_keeps_only_the_mean_baseline():
    assert grpo_advantages([1.0, 2.0, 3.0, 4.0], scale_by_std=False) == [-1.5, -0.5, 0.5, 1.5]


def test_identical_rewards_give_zero_advantage():
    assert grpo_advantages([3.0, 3.0, 3.0]) == [0.0, 0.0, 0.0]


def test_grpo_turn_advantages_share_one_baseline_per_group():
    # turns flattened: (1, 0, 2), mean 1
    assert grpo_turn_advantages([[1.0, 0.0], [2.0]], scale_by_std=False) == [[0.0, -1.0], [1.0]]


def test_gae_gamma_one_lambda_095():
    # δ = (0, 0, 0.5); A2 = 0.5, A1 = 0.95*0.5 = 0.475, A0 = 0.95*0.475 = 0.45125
    adv, ret = gae([0.0, 0.0, 1.0], [0.5, 0.5, 0.5], gamma=1.0, lam=0.95)
    assert adv == pytest.approx([0.45125, 0.475, 0.5])
    assert ret == pytest.approx([0.95125, 0.975, 1.0])


def test_gae_with_discount():
    # γ=0.9, λ=0.5, V=(1, 2), r=(1, 1): δ1 = 1 - 2 = -1; δ0 = 1 + 0.9*2 - 1 = 1.8
    # A1 = -1; A0 = 1.8 + 0.45*(-1) = 1.35
    adv, ret = gae([1.0, 1.0], [1.0, 2.0], gamma=0.9, lam=0.5)
    assert adv == pytest.approx([1.35, -1.0])
    assert ret == pytest.approx([2.35, 1.0])


def test_masked_gae_skips_observation_tokens():
    # action tokens at 0, 2, 3; the observation at 1 (value 9) must not bootstrap anything.
    rewards = torch.tensor([[0.0, 5.0, 0.0, 1.0]])
    values = torch.tensor([[0.1, 9.0, 0.3, 0.2]])
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0]])
    adv, ret = masked_gae(rewards, values, mask, gamma=1.0, lam=1.0)
    # compacted r=(0,0,1), V=(.1,.3,.2): δ=(.2, -.1, .8); A=(.9, .7, .8)
    assert adv.tolist()[0] == pytest.approx([0.9, 0.0, 0.7, 0.8])
    assert ret.tolist()[0] == pytest.approx([1.0, 0.0, 1.0, 1.0])


def test_masked_whiten_ignores_masked_entries():
    x = torch.tensor([[1.0, 100.0, 3.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    out = masked_whiten(x, mask)
    assert out.tolist()[0] == pytest.approx([-1.0, 0.0, 1.0], abs=1e-4)


def test_all_failed_group_gets_zero_advantages_whatever_its_lengths():
    # given: a group whose every turn failed at CUDA Agent's -1 floor, rollouts of 1, 2 and 3 turns
    from training.recipes import AlgoConfig
    from training.rollout import Rollout, Turn, TurnOutcome
    from training.trainer import batch_from_rollouts, grpo_token_advantages

    rollouts = []
    for index, turns in enumerate((1, 2, 3)):
        r = Rollout(task_name="t", group=0, index=index, prompt_ids=[1], reward_floor=-1.0)
        r.turns = [Turn(action_ids=[2, 3], text="", outcome=TurnOutcome(-1.0, "incorrect"), observation_ids=[4])
                   for _ in range(turns)]
        rollouts.append(r)
    batch = batch_from_rollouts(rollouts, pad_id=0)

    # when: per-turn discounted credit (Kevin) is normalised over the group
    adv = grpo_token_advantages(rollouts, batch, AlgoConfig(turn_credit="discounted", turn_gamma=0.4))

    # then: nothing to learn from, so nothing is pushed: every advantage is exactly 0
    assert discounted_turn_returns([-1.0, -1.0, -1.0], 0.4, floor=-1.0) == [0.0, 0.0, 0.0]
    assert discounted_turn_returns([-1.0, -1.0, -1.0], 0.4) == pytest.approx([-1.56, -1.4, -1.0])
    assert torch.count_nonzero(adv).item() == 0


def test_floor_relative_returns_keep_the_order_of_a_mixed_group():
    # a success at turn 2 (reward 3, floor -1): u = (0, 4) -> G = (1.6, 4.0)
    assert discounted_turn_returns([-1.0, 3.0], 0.4, floor=-1.0) == pytest.approx([1.6, 4.0])
