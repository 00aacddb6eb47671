import torch
import torch.nn as nn

# Little data, much arithmetic (about 0.5 GFLOP a call): the forward outweighs the judge's own work
# around each call (copying the input in, reading, keeping and fingerprinting the output), so time a
# timer hides from its forward stands out of the loop's own cost.
batch, in_features, out_features = 64, 8192, 512


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
