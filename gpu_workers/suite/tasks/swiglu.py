import torch
import torch.nn as nn
import torch.nn.functional as F

# Sizes: the module's own constants are the "cuda" profile; the evaluator's loader overwrites them
# with PROFILES[profile] before calling get_inputs() / get_init_inputs().
batch_size = 4096
dim = 4096

PROFILES = {
    "cpu": {"batch_size": 256, "dim": 512},
    "cuda": {"batch_size": 4096, "dim": 4096},
}


class Model(nn.Module):
    """SwiGLU gate: the input (batch, 2 * dim) holds the gate and the value side by side."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value = x.chunk(2, dim=-1)
        return F.silu(gate) * value


def get_inputs():
    return [torch.randn(batch_size, 2 * dim) * 2.0]


def get_init_inputs():
    return []
