"""The children's side of the protocol pieces that only a GPU evaluation uses end to end."""

from __future__ import annotations

import time

from gpu_workers.sandbox import process as sandbox


def test_a_candidate_child_warms_up_on_request_then_waits_for_its_setup():
    """The parent asks for the device context first (the candidate's turn comes later); the child
    answers without a key and still waits for its setup, running nothing else meanwhile."""
    with sandbox.spawn("candidate", env_extra={"CUDA_VISIBLE_DEVICES": ""}) as child:
        child.send({"warm": "cpu"})
        assert child.recv(time.monotonic() + 120) == {"phase": "warm"}
        assert child.pending_bytes(wait=0.3) == 0 and child.alive()  # nothing more until its setup


TASK = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
"""


def _reference_setup(serve: bool) -> dict:
    return {"task_source": TASK, "profile": None, "device": "cpu", "baselines": [], "threads": 1,
            "seeds": {"init": [1, 2], "trials": [[0, 3], [1, 4]], "rotations": [5], "after": 6},
            "count_flops": False, "timing_budget_s": 0.1, "serve": serve}


def _one_reference(child: sandbox.Child) -> list[str]:
    """Drive one reference evaluation: a go at each pause point; the phases seen, up to done."""
    phases = []
    while True:
        message = child.recv(time.monotonic() + 120)
        phases.append(f"checkpoint {message['step']}" if message["phase"] == "checkpoint" else message["phase"])
        if message["phase"] in ("checkpoint", "reference"):  # it waits for a go after its outputs, too
            child.signal()
        if message["phase"] in ("done", "error"):
            return phases


def test_a_reference_child_serves_setups_in_turn_only_when_asked():
    with sandbox.spawn("reference", env_extra={"CUDA_VISIBLE_DEVICES": ""}) as child:
        child.send(_reference_setup(serve=True))
        # it pauses once its models are built (before any GPU work), once they are on the device, after
        # each trial, and once its outputs are on the CPU
        steps = ["checkpoint constructed", "checkpoint models", "checkpoint trial", "checkpoint trial",
                 "checkpoint outputs", "reference", "done"]
        assert _one_reference(child) == steps
        assert child.alive()  # waiting for the next setup
        child.send(_reference_setup(serve=False))
        assert _one_reference(child) == steps
        assert child.proc.wait(timeout=30) == 0  # not asked to serve again: it exits
