"""Family 15: reduce only the first half of the rows; the rest of the output is whatever memory held."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty(x.shape[0], dtype=x.dtype)
        half = x.shape[0] // 2
        out[:half] = x[:half].sum(dim=1)
        return out
