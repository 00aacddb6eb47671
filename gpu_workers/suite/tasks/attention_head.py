import math

import torch
import torch.nn as nn

# Sizes: the module's own constants are the "cuda" profile; the evaluator's loader overwrites them
# with PROFILES[profile] before calling get_inputs() / get_init_inputs().
batch_size = 32
seq_len = 1024
dim = 1024
head_dim = 128

PROFILES = {
    "cpu": {"batch_size": 8, "seq_len": 128, "dim": 128, "head_dim": 64},
    "cuda": {"batch_size": 32, "seq_len": 1024, "dim": 1024, "head_dim": 128},
}


class Model(nn.Module):
    """One self-attention head (no mask): softmax(q k^T / sqrt(head_dim)) v, q/k/v = Linear(x)."""

    def __init__(self, dim: int, head_dim: int):
        super().__init__()
        self.q_proj = nn.Linear(dim, head_dim)
        self.k_proj = nn.Linear(dim, head_dim)
        self.v_proj = nn.Linear(dim, head_dim)
        self.scale = 1.0 / math.sqrt(head_dim)
        with torch.no_grad():  # sharper attention than the default init gives (not a near-uniform mean)
            self.q_proj.weight.mul_(3.0)
            self.k_proj.weight.mul_(3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.q_proj(x)
        k = self.k_proj(x)
        v = self.v_proj(x)
        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def get_inputs():
    return [torch.randn(batch_size, seq_len, dim)]


def get_init_inputs():
    return [dim, head_dim]
