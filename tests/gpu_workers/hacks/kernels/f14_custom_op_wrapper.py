"""Family 14 (strict track): torch.addmm wrapped in a Python torch.library custom op.

A dispatch mode sees only `hackarena::linear` (a non-aten namespace, treated as the candidate's own
kernel); the addmm inside runs with the mode popped, so it is never recorded.
"""
import torch
import torch.nn as nn


@torch.library.custom_op("hackarena::linear", mutates_args=())
def _linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.addmm(b, x, w.t())


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return _linear(x, self.linear.weight, self.linear.bias)
