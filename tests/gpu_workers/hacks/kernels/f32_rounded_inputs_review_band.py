"""Precision in the review band: inputs and weights rounded to 13 mantissa bits before an exact-order
matmul (what a cheaper multiplier would do); the error lands between the review and reject lines."""
import torch
import torch.nn as nn


def _round13(t):
    bits = t.contiguous().view(torch.int32)
    return ((bits + (1 << 9)) & ~((1 << 10) - 1)).view(torch.float32)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.addmm(self.linear.bias, _round13(x), _round13(self.linear.weight).t())
