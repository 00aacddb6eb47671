"""Fault: forward crashes the interpreter with a real SIGSEGV (from C, no Python-level guard in the way)."""
import faulthandler

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        faulthandler._sigsegv()
        return x
