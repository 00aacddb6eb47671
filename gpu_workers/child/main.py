"""Entry point of every sandboxed child: ``python -m gpu_workers.child.main ROLE IN_FD OUT_FD``.

Roles:
- ``compile``: import the candidate with the GPU hidden, so its extensions build into the cache;
- ``reference``: trusted; builds inputs from secret seeds, reference outputs (fp32 and fp64),
  FLOP and byte counts, and times the baselines;
- ``candidate``: imports the candidate AFTER the judge bound its functions, runs the trials with
  guards, times it, and streams raw observations to the parent, which alone gives the verdict.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

from ..sandbox import wire
from ..sandbox.wire import write_message
from .candidate import role_candidate
from .compile import role_compile
from .harden import harden_process
from .reference import role_reference, warm_lazy_imports
from .runtime import device_for
from .sender import Sender, short_traceback
from .size import role_size

_ROLES = {"compile": role_compile, "reference": role_reference, "candidate": role_candidate, "size": role_size}
# Imported while the child waits for its setup (a spare, or a child started early), not after it
# arrives (no candidate code runs before).
PRELOAD = {"compile": ("build.inline", "tasks"),
           "reference": ("child.measure", "child.timing", "tasks", "child.size", "child.perturb", "child.handover"),
           "candidate": ("child.measure", "child.timing", "tasks", "child.guard", "build.inline", "child.size",
                         "child.perturb", "child.handover"),
           "size": ("tasks", "child.size")}
# Imported by the child itself, never by the zygote: torch.utils.cpp_extension (which the candidate's
# load_inline and our fast build need, ~0.1-0.2 s of CPU) asks CUDA for its devices at import
# (torch.cuda.is_available, once it finds CUDA_HOME), which a process that forks children must not do.
PRELOAD_OWN = {"compile": ("torch.utils.cpp_extension",), "candidate": ("torch.utils.cpp_extension",)}
# Libraries torch imports on first use whose own import reads its caller's frames, imported before the
# candidate's guard is installed: sympy's multipledispatch registers into its caller's locals, and
# torch.jit.trace pulls it in at the candidate's first call of it.
PRELOAD_LIBRARIES = {"candidate": ("sympy",)}


def preload(role: str, own: bool = False) -> None:
    """Our modules and the libraries for ``role`` (what the zygote imports too); with ``own``, also
    those only a child may import."""
    import importlib

    for name in PRELOAD.get(role, ()):
        importlib.import_module(f"gpu_workers.{name}")
    for name in PRELOAD_LIBRARIES.get(role, ()):
        try:
            importlib.import_module(name)
        except ImportError:  # torch's own dependency: absent, torch cannot have imported it either
            pass
    for name in PRELOAD_OWN.get(role, ()) if own else ():
        importlib.import_module(name)


def _warm(role: str, setup: dict[str, Any], out_fd: int) -> None:
    """Make the CUDA context before the setup comes (the parent holds the GPU shared meanwhile) and
    say so: the context is then ready when the candidate's (or a kept reference child's first
    evaluation's) turn comes. No task or candidate code."""
    import torch

    device_for({"device": setup["warm"]})
    reply: dict[str, Any] = {"phase": "warm"}
    if role == "reference":
        reply["lazy"] = warm_lazy_imports()
    gc.freeze()  # what the warm-up made lives as long as the process: the collector skips it from now on
    write_message(out_fd, reply, None, torch.save)


def _serve_one(role: str, setup: dict[str, Any], in_fd: int, out_fd: int) -> int:
    send = Sender(out_fd, setup.pop("mac_key", None), in_fd)  # later reads: the parent's go for timing
    try:
        _ROLES[role](setup, send)
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        try:
            try:
                text = short_traceback(exc)
            except Exception:  # noqa: BLE001 - the audit guard may refuse to read frames here
                text = f"{type(exc).__name__}: {exc}"
            send("error", where="judge", build_error=False, error=text)
        except OSError:
            pass
        return 1
    return 0


def main(argv: list[str]) -> int:
    role, in_fd, out_fd = argv[0], int(argv[1]), int(argv[2])
    harden_process()
    import torch  # noqa: F401 - before the setup arrives: the parent may hold it until the GPU is free
    preload(role, own=True)
    gc.freeze()  # torch and ours (a zygote froze its own already): never walked by a collection
    setup = wire.read_message(in_fd)
    if role in ("candidate", "reference") and "warm" in setup:
        _warm(role, setup, out_fd)
        setup = wire.read_message(in_fd)
    if role in ("compile", "size"):
        os.close(in_fd)
        in_fd = -1
    while True:
        code = _serve_one(role, setup, in_fd, out_fd)
        if code or role != "reference" or not setup.get("serve"):
            return code
        # A reference child serves the next evaluation (refpool); the parent closes the pipe or kills it.
        try:
            setup = wire.read_message(in_fd)
        except (OSError, EOFError, wire.FormatError):
            return 0


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)  # skip interpreter teardown: candidate atexit hooks and thread joins don't run
