import torch
import torch.nn as nn

# Large enough (about 0.5 GFLOP a call) that PyTorch's intra-op pool splits it: a candidate that gives
# itself more threads than the baseline's budget really gains from them, and its CPU time shows it.
batch, in_features, out_features = 256, 1024, 1024


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
