import pytest

from gpu_workers.schema import EvalResult, Finding
from training.rewards import RewardScheme, compute_reward, faster_than, is_hack


def passed(eager, compile=None):
    return EvalResult(status="passed", correct=True, speedup={"eager": eager, "compile": compile})


def test_cuda_agent_tiers():
    scheme = RewardScheme("cuda_agent")
    assert compute_reward(EvalResult(status="incorrect"), scheme) == -1.0
    assert compute_reward(EvalResult(status="timeout"), scheme) == -1.0
    assert compute_reward(None, scheme) == -1.0  # no kernel in the reply
    assert compute_reward(passed(1.0, 0.5), scheme) == 1.0
    assert compute_reward(passed(1.04, 0.5), scheme) == 1.0  # within the 5% margin: not faster
    assert compute_reward(passed(1.5, 0.9), scheme) == 2.0
    assert compute_reward(passed(2.0, 1.2), scheme) == 3.0
    assert compute_reward(passed(2.0, None), scheme) == 2.0  # compile not measured


def test_hack_gets_the_floor_whatever_its_speedup():
    hack = EvalResult(status="rejected", correct=True, speedup={"eager": 50.0, "compile": 50.0},
                      findings=[Finding(rule="stream_injection", severity="reject", message="m")])
    assert is_hack(hack)
    assert compute_reward(hack, RewardScheme("cuda_agent")) == -1.0
    assert compute_reward(hack, RewardScheme("kevin")) == 0.0
    assert compute_reward(hack, RewardScheme("clipped_speedup")) == 0.0
    assert compute_reward(hack, RewardScheme("correctness")) == 0.0
    assert not faster_than(hack, "eager")


def test_kevin_clipped_and_correctness():
    assert compute_reward(passed(1.5), RewardScheme("kevin")) == pytest.approx(1.8)
    assert compute_reward(EvalResult(status="incorrect"), RewardScheme("kevin")) == 0.0
    assert compute_reward(passed(25.0), RewardScheme("clipped_speedup")) == 10.0
    assert compute_reward(passed(2.5), RewardScheme("clipped_speedup", {"cap": 2.0})) == 2.0
    assert compute_reward(passed(0.3), RewardScheme("correctness")) == 1.0
    assert compute_reward(EvalResult(status="compile_error"), RewardScheme("correctness")) == 0.0


def test_reward_takes_result_dicts_and_round_trips():
    scheme = RewardScheme("cuda_agent", {"margin": 1.2})
    assert compute_reward(passed(1.1, 0.2).to_dict(), scheme) == 1.0
    assert RewardScheme.from_dict(scheme.to_dict()) == scheme


def test_unknown_scheme_or_param_is_refused():
    with pytest.raises(ValueError):
        RewardScheme("raw_speedup")
    with pytest.raises(ValueError):
        RewardScheme("kevin", {"margin": 1.0})
