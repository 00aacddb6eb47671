"""One GRPO step and one PPO step (with a critic) of a randomly initialised model of a named shape:
tokens per second and peak memory, and, measured in the same run, the plain full-logits log-probs against
the chunked ones on one sample (their peak memory and time, and the ratio).

    python bench/train_step.py --shape tiny --device cpu --seq 64 --batch 4           # smoke test
    python bench/train_step.py --shape qwen2-0.5b --seq 4096 --batch 8                 # H200, bf16
    python bench/train_step.py --shape qwen2-1.5b --seq 4096 --batch 8 --lora 64
    python bench/train_step.py --shape qwen2-7b --seq 16384 --batch 8 --lora 64

The model is the real architecture (Qwen2: grouped-query attention, untied or tied head, the 151,936 or
152,064 vocabulary) with random weights, built directly on the device in the run's dtype. The samples
are random token ids, a prompt of ``seq // 8`` tokens then ``seq - seq // 8`` action tokens, one group
of ``batch`` rollouts with different rewards. Each step is run ``--steps`` times; the last one is
reported (the first includes one-time kernel selection). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from training.losses import token_logprobs  # noqa: E402
from training.policy import ModelSpec, prepare_for_training, sequence_logprobs  # noqa: E402
from training.recipes import AlgoConfig, OptimConfig  # noqa: E402
from training.rollout import Rollout, Turn, TurnOutcome  # noqa: E402
from training.trainer import Trainer  # noqa: E402
from training.value import CriticModel  # noqa: E402


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tie: bool
    max_positions: int = 32768


# The public configs of Qwen2 / Qwen2.5 at these sizes (config.json of each model).
SHAPES = {
    "tiny": Shape(hidden=32, layers=2, heads=4, kv_heads=2, intermediate=64, vocab=512, tie=True,
                  max_positions=4096),
    "qwen2-0.5b": Shape(hidden=896, layers=24, heads=14, kv_heads=2, intermediate=4864, vocab=151936,
                        tie=True),
    "qwen2-1.5b": Shape(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960, vocab=151936,
                        tie=True),
    "qwen2-7b": Shape(hidden=3584, layers=28, heads=28, kv_heads=4, intermediate=18944, vocab=152064,
                      tie=False),
}


def build(shape: Shape, *, device: str, dtype: torch.dtype, attn: str, seed: int) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers,
                         num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                         intermediate_size=shape.intermediate, max_position_embeddings=shape.max_positions,
                         tie_word_embeddings=shape.tie, pad_token_id=0, eos_token_id=1, use_cache=False)
    extra = {"attn_implementation": attn} if attn else {}
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # initialise in the run's dtype: a 7B model never exists in fp32
    try:
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, **extra)
    finally:
        torch.set_default_dtype(previous)
    return model.to(device=device, dtype=dtype)


def rollouts(batch: int, seq: int, vocab: int, seed: int) -> list[Rollout]:
    gen = torch.Generator().manual_seed(seed)
    prompt_len = max(1, seq // 8)
    prompt = torch.randint(2, vocab, (prompt_len,), generator=gen).tolist()
    out = []
    for i in range(batch):
        action = torch.randint(2, vocab, (seq - prompt_len,), generator=gen).tolist()
        reward = float(i % 4) - 1.0  # CUDA Agent's −1/1/2/3 scale, spread over the group
        turn = Turn(action_ids=action, text="", outcome=TurnOutcome(reward=reward, status="ok"))
        out.append(Rollout(task_name="bench", group=0, index=i, prompt_ids=prompt, turns=[turn]))
    return out


class Meter:
    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def run(self, fn: Callable[[], Any]) -> tuple[Any, float, int | None]:
        """(result, seconds, peak bytes allocated during fn, or None off CUDA)."""
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        self.sync()
        start = time.perf_counter()
        result = fn()
        self.sync()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if self.cuda else None
        return result, seconds, peak


def gib(n: int | None) -> float | None:
    return None if n is None else round(n / 2**30, 3)


def logprob_baseline(model: torch.nn.Module, sample: Rollout, device: str, chunk: int, meter: Meter
                     ) -> dict[str, Any]:
    """Forward + backward of the mean action log-prob of one sample: full logits vs chunked."""
    ids = torch.tensor([sample.token_ids()], device=device)
    attn = torch.ones_like(ids)
    mask = torch.tensor([sample.action_mask()[1:]], device=device, dtype=torch.float32)

    def plain() -> None:
        lp = token_logprobs(model(input_ids=ids, attention_mask=attn).logits, ids)
        (-(lp * mask).sum() / mask.sum()).backward()

    def chunked() -> None:
        lp, _ = sequence_logprobs(model, ids, attn, positions=mask, entropy="detached", chunk_tokens=chunk)
        (-(lp * mask).sum() / mask.sum()).backward()

    out: dict[str, Any] = {}
    for name, fn in (("chunked", chunked), ("plain", plain)):
        for _ in range(2):  # the first run selects kernels
            model.zero_grad(set_to_none=True)
            try:
                _, seconds, peak = meter.run(fn)
                out[name] = {"seconds": round(seconds, 4), "peak_gib": gib(peak)}
            except torch.cuda.OutOfMemoryError:
                out[name] = {"seconds": None, "peak_gib": None, "oom": True}
                break
    model.zero_grad(set_to_none=True)
    c, p = out["chunked"], out["plain"]
    if c.get("peak_gib") and p.get("peak_gib"):
        out["memory_ratio_plain_over_chunked"] = round(p["peak_gib"] / c["peak_gib"], 3)
    if c.get("seconds") and p.get("seconds"):
        out["time_ratio_plain_over_chunked"] = round(p["seconds"] / c["seconds"], 3)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2-0.5b")
    ap.add_argument("--seq", type=int, default=4096, help="tokens per sample")
    ap.add_argument("--batch", type=int, default=8, help="samples (one GRPO group)")
    ap.add_argument("--lora", type=int, default=0, help="LoRA rank (0: train every weight)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                    help="weights' dtype (default: bfloat16 on CUDA, float32 on the CPU)")
    ap.add_argument("--micro-tokens", type=int, default=0, help="micro-batch token budget (default: --seq)")
    ap.add_argument("--chunk", type=int, default=1024, help="LM-head positions per chunk")
    ap.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa, flash_attention_2, eager)")
    ap.add_argument("--steps", type=int, default=2, help="runs of each step; the last is reported")
    ap.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True,
                    help="also measure plain vs chunked log-probs on one sample")
    ap.add_argument("--ppo", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.seq < 2 or args.batch < 1 or args.steps < 1:
        ap.error("--seq must be ≥ 2, --batch and --steps ≥ 1")
    shape = SHAPES[args.shape]
    if args.seq > shape.max_positions:
        ap.error(f"--seq {args.seq} is past the {args.shape} shape's {shape.max_positions} positions")
    dtype = getattr(torch, args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32"))
    meter = Meter(args.device)

    model = build(shape, device=args.device, dtype=dtype, attn=args.attn if args.device != "cpu" else "",
                  seed=args.seed)
    model = prepare_for_training(model, ModelSpec(gradient_checkpointing=args.grad_ckpt, lora_rank=args.lora,
                                                  lora_alpha=2.0 * args.lora))
    model.train()  # gradient checkpointing applies in training mode only
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    data = rollouts(args.batch, args.seq, shape.vocab, args.seed)
    tokens = args.batch * args.seq
    optim = OptimConfig(lr=1e-6, critic_lr=5e-6, micro_batch_tokens=args.micro_tokens or args.seq,
                        logprob_chunk_tokens=args.chunk)
    report: dict[str, Any] = {
        "shape": args.shape, "device": args.device, "dtype": str(dtype).removeprefix("torch."),
        "gpu": torch.cuda.get_device_name() if meter.cuda else None, "torch": torch.__version__,
        "seq": args.seq, "batch": args.batch, "tokens": tokens, "lora": args.lora,
        "grad_ckpt": args.grad_ckpt,
        "micro_batch_tokens": optim.micro_batch_tokens, "chunk": args.chunk, "attn": args.attn,
        "params": params, "trainable": trainable,
    }
    where = report["gpu"] or args.device
    print(f"{args.shape}: {params / 1e6:.1f}M parameters ({trainable / 1e6:.1f}M trainable), "
          f"{args.batch} x {args.seq} tokens, {report['dtype']} on {where}", flush=True)
    if args.baseline:
        report["logprobs"] = logprob_baseline(model, data[0], args.device, args.chunk, meter)
        print("log-probs of one sample (forward+backward):", json.dumps(report["logprobs"]), flush=True)

    trainer = Trainer(model, optim=optim, pad_id=0, device=args.device)
    algo = AlgoConfig(group_size=args.batch, loss_aggregation="seq_mean_token_sum_norm", kl_coef=0.0)
    report["grpo"] = _timed_steps(lambda: trainer.grpo_step(data, algo, norm_length=args.seq), args.steps,
                                  tokens, meter)
    _print("GRPO step", report["grpo"])
    if args.ppo:
        critic = CriticModel.sharing(model) if args.lora else CriticModel(copy.deepcopy(model))
        critic = critic.to(args.device)
        trainer.attach_critic(critic)
        ppo = AlgoConfig(gamma=1.0, lam=0.95, kl_coef=0.0, loss_aggregation="token_mean")
        report["ppo"] = _timed_steps(lambda: trainer.ppo_step(data, ppo), args.steps, tokens, meter)
        report["ppo"]["critic"] = "shared LoRA base" if args.lora else "own copy"
        _print("PPO step (critic)", report["ppo"])
    print(json.dumps(report), flush=True)
    return report


def _timed_steps(step: Callable[[], dict[str, Any]], runs: int, tokens: int, meter: Meter) -> dict[str, Any]:
    first = None
    for i in range(runs):
        stats, seconds, peak = meter.run(step)
        row = {"seconds": round(seconds, 3), "tokens_per_s": round(tokens / seconds, 1),
               "peak_gib": gib(peak), "grad_norm": stats["grad_norm"], "value_loss": stats.get("value_loss")}
        if i == 0:
            first = row["seconds"]
    row["first_seconds"] = first
    return row


def _print(name: str, row: dict[str, Any]) -> None:
    peak = f"{row['peak_gib']} GiB peak" if row["peak_gib"] is not None else "peak n/a off CUDA"
    print(f"{name}: {row['tokens_per_s']} tokens/s ({row['seconds']} s; first run {row['first_seconds']} s), "
          f"{peak}", flush=True)


if __name__ == "__main__":
    main()
