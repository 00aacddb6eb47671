"""Fault: the candidate signals its parent (the evaluator) with SIGKILL, spelled past the static rules."""
import os
import signal

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        getattr(os, "ki" + "ll")(os.getppid(), signal.SIGKILL)
        return torch.relu(x * 1.5 + 0.25)
