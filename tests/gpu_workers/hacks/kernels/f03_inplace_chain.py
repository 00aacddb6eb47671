"""Family 3: compute in place on the input and return it (the reference would see the result)."""
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x.mul_(1.5).add_(0.25).relu_()
