"""Family 8 (and 7): take over the judge's own verdict channel from inside forward.

On the first timed call, walk up the stack (getattr spellings dodge the static rules) to the
candidate role's frame, take its `send`, `setup`, `guarded` and `rotations`, send a correct-looking
`timing_end` with a time one third of the real one, the `after` observations and `done` with the right
sequence numbers, then exit with status 0 before the judge's own timing ever finishes.
"""
import os
import sys

import torch
import torch.nn as nn

_busy = []


def _honest(x):
    return torch.relu(x * 1.5 + 0.25)


def _locals_of(name):
    frame = getattr(sys, "_get" + "frame")(0)
    while frame is not None:
        if frame.f_code.co_name == name:
            return getattr(frame, "f_" + "locals")
        frame = getattr(frame, "f_" + "back")
    return None


def _take_over():
    measure = sys.modules["gpu_workers.child.measure"]
    role = _locals_of("role_candidate")
    send, setup, guarded, models = role["send"], role["setup"], role["guarded"], role["models"]
    sample = role["rotations"][0][0]
    start = measure._perf_counter()
    for _ in range(20):
        _honest(sample)
    claimed = (measure._perf_counter() - start) * 1e3 / 20 / 3.0
    iterations = 60
    kept = [measure.to_cpu(measure.snapshot(_honest(r[0]))) for r in role["rotations"]]
    stats = {"median_ms": claimed, "host_median_ms": claimed, "min_ms": claimed * 0.97,
             "max_ms": claimed * 1.05, "spread": 0.01, "iterations": iterations, "total_ms": claimed * iterations}
    send("timing_end", stats=stats, kept_outputs=kept)
    first = setup["trials"][0]
    after = guarded(models[0], list(setup["after"]), False)
    again = guarded(models[first["config"]], list(first["inputs"]), False)
    send("after", after=after, again=again)
    send("done", patched=[])
    getattr(os, "_ex" + "it")(0)


class ModelNew(nn.Module):
    def forward(self, x):
        if not _busy and _locals_of("time_callable") is not None:
            _busy.append(True)
            _take_over()
        return _honest(x)
