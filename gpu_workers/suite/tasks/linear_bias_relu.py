import torch
import torch.nn as nn

# Sizes: the module's own constants are the "cuda" profile; the evaluator's loader overwrites them
# with PROFILES[profile] before calling get_inputs() / get_init_inputs().
batch_size = 4096
in_features = 2048
out_features = 2048

PROFILES = {
    "cpu": {"batch_size": 256, "in_features": 256, "out_features": 256},
    "cuda": {"batch_size": 4096, "in_features": 2048, "out_features": 2048},
}


class Model(nn.Module):
    """relu(x @ W^T + b)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
