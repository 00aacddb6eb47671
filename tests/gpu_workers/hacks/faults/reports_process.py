"""Not a fault: reports how the process that runs its module is scheduled, and how many objects its
garbage collector leaves alone (frozen in the zygote before the fork). Mentions ctypes, so it
gets a compile phase: the module runs in the compile child first, then in the candidate child."""

import ctypes  # noqa: F401 - a build marker
import gc
import os
import sys

import torch
import torch.nn as nn

print(f"module run at niceness {os.getpriority(os.PRIO_PROCESS, 0)}", file=sys.stderr, flush=True)
print(f"frozen objects: {gc.get_freeze_count()}", file=sys.stderr, flush=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x * 1.5 + 0.25)
