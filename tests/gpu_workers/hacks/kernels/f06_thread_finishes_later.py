"""Family 6: return an unwritten buffer; a thread (imported without an import statement) fills it later."""
import time

import torch
import torch.nn as nn

_threading = __import__("thread" + "ing")


def _finish(x, out):
    time.sleep(0.002)
    torch.mul(x, 1.5, out=out)
    out.add_(0.25).relu_()


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        _threading.Thread(target=_finish, args=(x, out), daemon=True).start()
        return out
