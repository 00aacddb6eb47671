"""``bench/train_step.py`` runs end to end at the tiny shape on the CPU (the H200 runs the real shapes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("lora", ["0", "4"])
def test_train_step_bench_runs_tiny_on_the_cpu(lora):
    # when the bench runs one GRPO and one PPO step of the tiny shape
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "train_step.py"), "--shape", "tiny", "--device", "cpu",
         "--seq", "48", "--batch", "3", "--steps", "1", "--lora", lora, "--chunk", "16"],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    # then its last line is the report, with both steps and the baseline measured
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (report["shape"], report["tokens"], report["lora"]) == ("tiny", 144, int(lora))
    assert report["micro_batch_tokens"] == 48  # one sample per micro-batch by default
    assert report["trainable"] < report["params"] if lora == "4" else report["trainable"] == report["params"]
    for step in ("grpo", "ppo"):
        assert report[step]["tokens_per_s"] > 0 and report[step]["grad_norm"] > 0
        assert report[step]["peak_gib"] is None  # max_memory_allocated exists on CUDA only
    assert report["ppo"]["value_loss"] > 0
    assert report["ppo"]["critic"] == ("shared LoRA base" if lora == "4" else "own copy")
    assert set(report["logprobs"]) >= {"chunked", "plain"} and report["logprobs"]["chunked"]["seconds"] > 0
    assert "GRPO step:" in proc.stdout and "PPO step (critic):" in proc.stdout


@pytest.mark.gpu
def test_train_step_bench_on_cuda_the_chunked_log_probs_use_less_memory():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "train_step.py"), "--shape", "qwen2-0.5b", "--device", "cuda",
         "--seq", "2048", "--batch", "2", "--steps", "1"],
        capture_output=True, text=True, timeout=900, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["dtype"] == "bfloat16" and report["params"] > 490_000_000
    # the plain full-logits computation holds bf16 + fp32 [T, 151936] logits; the chunked one never does
    assert report["logprobs"]["memory_ratio_plain_over_chunked"] > 1.5
    assert report["grpo"]["peak_gib"] > 0 and report["ppo"]["value_loss"] > 0
