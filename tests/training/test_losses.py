import math

import pytest
import torch

from training.losses import (
    aggregate_loss,
    entropy_from_logits,
    kl_penalty,
    ppo_clip_loss,
    token_logprobs,
    value_loss,
)


def test_ppo_asymmetric_and_dual_clip():
    ratios = torch.tensor([[0.5, 1.0, 1.5, 1.5, 5.0]])
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0]])
    mask = torch.ones_like(adv)
    out = ppo_clip_loss(ratios.log(), torch.zeros_like(adv), adv, mask, clip_low=0.2, clip_high=0.28, dual_clip=3.0)
    # ρ=.5,A=1: max(-.5, -.8) = -.5 | ρ=1: -1 | ρ=1.5,A=1: max(-1.5, -1.28) = -1.28 (clipped high)
    # ρ=1.5,A=-1: max(1.5, 1.28) = 1.5 | ρ=5,A=-1: max(5, 1.28) = 5, dual clip → min(5, 3) = 3
    assert out.token_loss.tolist()[0] == pytest.approx([-0.5, -1.0, -1.28, 1.5, 3.0])
    assert float(out.clip_fraction) == pytest.approx(0.2)
    assert float(out.dual_clip_fraction) == pytest.approx(0.2)


def test_ppo_without_dual_clip_is_unbounded_for_negative_advantages():
    out = ppo_clip_loss(torch.tensor([[math.log(5.0)]]), torch.zeros(1, 1), torch.tensor([[-1.0]]),
                        torch.ones(1, 1), dual_clip=None)
    assert out.token_loss.item() == pytest.approx(5.0)


def test_clip_low_bounds_the_decrease():
    # ρ = 0.5 with A = -1: max(0.5, 0.8) = 0.8 (clipped at 1 - 0.2)
    out = ppo_clip_loss(torch.tensor([[math.log(0.5)]]), torch.zeros(1, 1), torch.tensor([[-1.0]]), torch.ones(1, 1))
    assert out.token_loss.item() == pytest.approx(0.8)
    assert float(out.clip_fraction) == 1.0


def test_loss_aggregations():
    loss = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert aggregate_loss(loss, mask, "seq_mean_token_mean").item() == pytest.approx(3.0)  # (2 + 4) / 2
    assert aggregate_loss(loss, mask, "token_mean").item() == pytest.approx(2.5)  # 10 / 4
    # Dr.GRPO: (6/4 + 4/4) / 2
    assert aggregate_loss(loss, mask, "seq_mean_token_sum_norm", norm_length=4).item() == pytest.approx(1.25)
    with pytest.raises(ValueError):
        aggregate_loss(loss, mask, "nope")


def test_kl_estimators():
    lp, ref = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert kl_penalty(lp, ref, "k1").item() == pytest.approx(math.log(2))
    assert kl_penalty(lp, ref, "k2").item() == pytest.approx(0.5 * math.log(2) ** 2)
    assert kl_penalty(lp, ref, "k3").item() == pytest.approx(0.5 + math.log(2) - 1)
    assert kl_penalty(lp, lp, "k3").item() == 0.0


def test_entropy_of_uniform_logits():
    assert entropy_from_logits(torch.zeros(2, 4)).tolist() == pytest.approx([math.log(4)] * 2)


def test_value_loss_clipped():
    mask = torch.ones(1, 1)
    # unclipped error 0; clipped value 0.5 - 0.2 = 0.3 → 0.09; ½·max = 0.045
    assert value_loss(torch.zeros(1, 1), torch.full((1, 1), 0.5), torch.zeros(1, 1), mask).item() == pytest.approx(0.045)
    assert value_loss(torch.zeros(1, 1), torch.full((1, 1), 0.5), torch.zeros(1, 1), mask, clip=None).item() == 0.0


def test_token_logprobs_align_with_next_token():
    logits = torch.zeros(1, 3, 2)
    logits[0, 0, 1] = math.log(3.0)  # p(token 1 | pos 0) = 3/4
    ids = torch.tensor([[0, 1, 0]])
    lp = token_logprobs(logits, ids)
    assert lp.shape == (1, 2)
    assert lp.tolist()[0] == pytest.approx([math.log(0.75), math.log(0.5)])
