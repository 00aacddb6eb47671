"""Runs of whole recipes on the CPU with the synthetic reward: learning, cancel, crash and resume, CLI."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from training.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint
from training.metrics import ListSink, read_metrics
from training.recipes import AlgoConfig, OptimConfig, RunConfig, SamplingConfig, StageConfig, tiny_cpu_grpo
from training.runner import run_training

REPO = Path(__file__).resolve().parents[2]


def small_two_stage() -> RunConfig:
    """GRPO then PPO (critic, KL to a reference): every piece a checkpoint must carry."""
    cfg = tiny_cpu_grpo()
    cfg.name = "two_stage"
    cfg.sampling = SamplingConfig(max_new_tokens=8, max_context=128)
    cfg.algo = dataclasses.replace(cfg.algo, group_size=4, kl_coef=0.05)
    cfg.optim = OptimConfig(lr=1e-2, critic_lr=1e-2)
    cfg.stages = [StageConfig(name="grpo", kind="grpo", steps=2),
                  StageConfig(name="ppo", kind="ppo", steps=3, algo={"kl_mode": "reward", "kl_estimator": "k1"})]
    cfg.checkpoint_every = 3
    cfg.keep_checkpoints = 5
    return cfg


def test_tiny_model_learns_the_synthetic_reward(tmp_path):
    cfg = tiny_cpu_grpo()
    cfg.stages[0].steps = 12
    sink = ListSink()
    result = run_training(cfg, out_dir=tmp_path, sink=sink)
    rewards = [m.reward_mean for m in sink.metrics]
    assert result.status == "completed" and result.step == 12
    assert sum(rewards[:3]) / 3 < 0.05  # a random byte is 'a' 1 time in 263
    assert sum(rewards[-3:]) / 3 > 0.3
    assert [m.step for m in read_metrics(tmp_path / "metrics.jsonl")] == list(range(1, 13))
    assert set(sink.trajectories) == set(range(1, 13)) and len(sink.trajectories[12]) == 2
    assert json.loads((tmp_path / "config.json").read_text()) == cfg.to_dict()


def test_crash_then_resume_repeats_the_same_metrics(tmp_path):
    cfg = small_two_stage()
    straight = ListSink()
    run_training(cfg, out_dir=tmp_path / "straight", sink=straight)
    assert [m.stage for m in straight.metrics] == ["grpo", "grpo", "ppo", "ppo", "ppo"]
    assert straight.metrics[-1].value_loss is not None and straight.metrics[-1].kl is not None

    calls = {"n": 0}

    def crash_before_step_5():
        calls["n"] += 1
        if calls["n"] == 5:
            raise RuntimeError("simulated crash")
        return False

    crashed_dir = tmp_path / "crashed"
    with pytest.raises(RuntimeError, match="simulated crash"):
        run_training(cfg, out_dir=crashed_dir, cancel=crash_before_step_5)
    # checkpoints after step 2 (end of the grpo stage) and step 3 (every 3); step 4 ran but was not saved
    assert [load_checkpoint(p)[0].step for p in list_checkpoints(crashed_dir)] == [2, 3]
    state, stored = load_checkpoint(latest_checkpoint(crashed_dir))
    assert (state.stage_index, state.stage_step) == (1, 1) and stored == cfg.to_dict()

    resumed = ListSink()
    result = run_training(cfg, out_dir=crashed_dir, sink=resumed, resume=True)
    assert result.status == "completed" and result.step == 5
    assert [m.step for m in resumed.metrics] == [4, 5]
    on_disk = read_metrics(crashed_dir / "metrics.jsonl")
    assert [m.step for m in on_disk] == [1, 2, 3, 4, 5]
    assert [m.deterministic_dict() for m in on_disk] == [m.deterministic_dict() for m in straight.metrics]


def test_cancel_stops_cleanly_and_resume_continues(tmp_path):
    cfg = small_two_stage()
    cfg.stages = cfg.stages[:1]
    cfg.stages[0].steps = 3
    calls = {"n": 0}

    def cancel_after_two_steps():
        calls["n"] += 1
        return calls["n"] > 2

    sink = ListSink()
    result = run_training(cfg, out_dir=tmp_path, sink=sink, cancel=cancel_after_two_steps)
    assert result.status == "cancelled" and result.step == 2
    assert load_checkpoint(latest_checkpoint(tmp_path))[0].step == 2
    assert sink.statuses[-1] == ("cancelled", {"step": 2})
    again = ListSink()
    result = run_training(cfg, out_dir=tmp_path, sink=again, resume=True)
    assert result.status == "completed" and [m.step for m in again.metrics] == [3]


def test_resume_refuses_a_changed_config(tmp_path):
    cfg = small_two_stage()
    cfg.stages = cfg.stages[:1]
    cfg.stages[0].steps = 1
    run_training(cfg, out_dir=tmp_path)
    cfg.optim.lr = 0.5
    with pytest.raises(ValueError, match=r"differs from its checkpoint's in \['optim'\]"):
        run_training(cfg, out_dir=tmp_path, resume=True)


def test_command_line_prints_metrics_json_lines(tmp_path):
    cfg = tiny_cpu_grpo()
    cfg.sampling = SamplingConfig(max_new_tokens=4, max_context=64)
    cfg.algo = AlgoConfig(group_size=2)
    cfg.stages[0].steps = 2
    path = tmp_path / "run.json"
    path.write_text(cfg.to_json())
    proc = subprocess.run([sys.executable, "-m", "training", "run", "--config", str(path), "--out",
                           str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(row["type"], row["step"]) for row in lines] == [("metrics", 1), ("metrics", 2)]
    assert lines[0]["num_rollouts"] == 4 and lines[0]["stage"] == "grpo"


def test_command_line_refuses_a_bad_config(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"name": "x", "stages": [{"name": "s", "kind": "ppo", "steps": 1}], "lr": 1}))
    proc = subprocess.run([sys.executable, "-m", "training", "run", "--config", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown RunConfig fields: ['lr']" in proc.stderr
