"""Fault: forward ends the process with status 0 (spelled through getattr to pass the static rules)."""
import os

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        getattr(os, "_ex" + "it")(0)
