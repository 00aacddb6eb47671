"""Fault: the constructor raises."""
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise ValueError("kernelcourt-fault: constructor refuses")

    def forward(self, x):
        return x
