"""Fault: forward allocates (and touches) 1 GiB at a time, up to 64 GiB."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        hoard = []
        for _ in range(64):
            hoard.append(torch.ones(1 << 28))  # 1 GiB of float32, written
        return x
