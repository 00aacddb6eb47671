import json

import pytest

from training.recipes import BUILTIN_RECIPES, CONFIGS_DIR, RunConfig


@pytest.mark.parametrize("name", sorted(BUILTIN_RECIPES))
def test_shipped_configs_are_the_builtin_recipes(name):
    stored = json.loads((CONFIGS_DIR / f"{name}.json").read_text())
    assert stored == BUILTIN_RECIPES[name]().to_dict()
    assert RunConfig.from_dict(stored).to_dict() == stored


def test_recipes_encode_the_papers():
    agent = BUILTIN_RECIPES["cuda_agent"]()
    assert [s.kind for s in agent.stages] == ["ppo", "rft", "critic_warmup", "ppo"]
    assert (agent.algo.clip_low, agent.algo.clip_high, agent.algo.gamma, agent.algo.lam) == (0.2, 0.28, 1.0, 0.95)
    assert agent.reward.name == "cuda_agent_levels" and agent.reward.floor == -1.0
    l1 = BUILTIN_RECIPES["cuda_l1"]()
    assert [s.kind for s in l1.stages] == ["sft", "rft", "grpo"]
    assert l1.stage_reward(l1.stages[1]).name == "correctness"
    assert l1.data.sources == [{"kind": "variants_jsonl", "path": "data/cuda_l1_variants.jsonl"}]
    assert l1.stage_reward(l1.stages[2]).resolved()["clip_max"] == 10.0
    assert l1.stage_algo(l1.stages[2]).contrastive_variants == 4
    kevin = BUILTIN_RECIPES["kevin"]()
    assert (kevin.algo.turn_credit, kevin.algo.turn_gamma, kevin.sampling.max_turns) == ("discounted", 0.4, 4)


def test_stage_overrides_and_validation():
    cfg = BUILTIN_RECIPES["cuda_agent"]()
    assert cfg.stage_sampling(cfg.stages[3]).max_turns == 8 and cfg.sampling.max_turns == 1
    data = cfg.to_dict()
    data["stages"][0]["algo"] = {"clip_hi": 0.3}
    with pytest.raises(ValueError, match="unknown algo overrides"):
        RunConfig.from_dict(data)
    data = cfg.to_dict()
    data["algo"]["kl_estimator"] = "k4"
    with pytest.raises(ValueError, match="kl_estimator"):
        RunConfig.from_dict(data)
    data = cfg.to_dict()
    data["version"] = 99
    with pytest.raises(ValueError, match="version"):
        RunConfig.from_dict(data)


def test_config_hash_changes_with_any_hyperparameter():
    a, b = BUILTIN_RECIPES["kevin"](), BUILTIN_RECIPES["kevin"]()
    assert a.config_hash() == b.config_hash()
    b.algo.turn_gamma = 0.5
    assert a.config_hash() != b.config_hash()


def test_reward_is_a_gpu_workers_reward_config_plus_shaping():
    from training.recipes import RewardConfig

    cfg = RewardConfig({"kind": "levels", "margin": 0.1}, no_candidate_reward=-2.0)
    assert cfg.resolved()["margin"] == 0.1 and cfg.resolved()["beats_both"] == 3.0 and cfg.floor == -1.0
    assert RewardConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown reward config 'raw_speedup'"):
        RewardConfig("raw_speedup")
    with pytest.raises(ValueError, match="unknown reward fields"):
        RewardConfig.from_dict({"config": "kevin", "margin": 1.0})
