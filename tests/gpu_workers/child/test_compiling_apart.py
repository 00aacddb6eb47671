"""A baseline's compile lets the GPU go and takes it back before the compiled code runs."""

from __future__ import annotations

import torch

from gpu_workers.child.reference import compiling_apart


class Recorder:
    """The sender's pause points, in order, with what had run by then."""

    def __init__(self, ran: list[str]):
        self.ran = ran
        self.pauses: list[tuple[str, int]] = []

    def pause(self, phase: str, **_payload) -> None:
        self.pauses.append((phase, len(self.ran)))


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2


def recording_backend(ran: list[str]):
    """A backend whose compiled code says when it runs."""

    def backend(graph, _example_inputs):
        def run(*args):
            ran.append("compiled code")
            return graph.forward(*args)

        return run

    return backend


def test_the_gpu_is_let_go_for_the_trace_and_taken_back_before_the_first_run():
    torch._dynamo.reset()
    ran: list[str] = []
    send = Recorder(ran)
    compiled = torch.compile(Model(), backend=recording_backend(ran))
    with compiling_apart(send, torch.device("cpu")):
        out = compiled(torch.randn(8))
    assert send.pauses == [("compiling", 0), ("compiled", 0)]  # taken back before the code first ran
    assert ran == ["compiled code"] and out.shape == (8,)
    compiled(torch.randn(8))  # outside the block nothing more is said
    assert len(send.pauses) == 2


def test_a_graph_break_pairs_every_compile():
    torch._dynamo.reset()
    ran: list[str] = []
    send = Recorder(ran)

    def broken(x):
        y = torch.relu(x)
        torch._dynamo.graph_break()
        return y + 1

    with compiling_apart(send, torch.device("cpu")):
        torch.compile(broken, backend="eager")(torch.randn(4))
    phases = [phase for phase, _ in send.pauses]
    assert phases and phases == ["compiling", "compiled"] * (len(phases) // 2)


IMPORTS_APART = r'''
import sys
import torch
from gpu_workers.child import reference

pauses = []


class Recorder:
    def pause(self, phase, **_payload):
        pauses.append((phase, [m in sys.modules for m in reference.COMPILE_MODULES]))


send = Recorder()
reference.compile_imports_apart(send, torch.device("cpu"))
reference.compile_imports_apart(send, torch.device("cpu"))  # once per process
print(pauses)
'''


def test_torch_compiles_own_imports_happen_with_the_gpu_let_go_once_per_process():
    import subprocess
    import sys

    # a fresh process: this one may have imported dynamo already
    out = subprocess.run([sys.executable, "-c", IMPORTS_APART], capture_output=True, text=True, check=True)
    pauses = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 - our own script's repr of a list
    # let go before the imports, taken back once they are done, and only the first time
    assert pauses == [("compiling", [False, False]), ("compiled", [True, True])]
