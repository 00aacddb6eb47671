"""The candidate's ``load_inline``, fastest build first.

Installed in the compile and candidate children before the candidate's code runs: a call of
``torch.utils.cpp_extension.load_inline`` tries the light build (``build.light``, light+split then
light), then the split build (``build.split``), then torch's own plain build. A build that fails leaves
a marker in its folder, so the run phase and later evaluations of the same name go straight to the
next one; the compile log says which build made the module and where its time went.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from pathlib import Path
from typing import Any

from . import baton, light, split


def install() -> bool:
    """Replace ``torch.utils.cpp_extension.load_inline`` in this process (a compile or candidate
    child) with one that tries the light build first (``build.light``), then the split build, then the
    plain one. Off without ``TORCH_EXTENSIONS_DIR`` (only our children set it) or on a torch without
    ``no_implicit_headers``; ``KERNELCOURT_LITE=0`` and ``KERNELCOURT_SPLIT=0`` turn off one path each.
    Every build in the process takes its folder's baton on a live lock (``build.baton``)."""
    baton.install()
    if not os.environ.get("TORCH_EXTENSIONS_DIR"):
        return False
    from torch.utils import cpp_extension

    original = cpp_extension.load_inline
    signature = inspect.signature(original)
    if "no_implicit_headers" not in signature.parameters:
        return False

    def note(text: str) -> None:  # the compile log says which build made the module
        print(f"[kernelcourt] {text}", file=sys.stderr, flush=True)

    def fell_back(marker: Path, name: str, exc: BaseException) -> None:
        kind = "light" if marker.name.startswith("lite") else "split"
        note(f"{name}: a {kind} build failed ({type(exc).__name__}: {str(exc)[:200]}); trying the next build")
        marker.write_text(f"{type(exc).__name__}: {exc}"[-8000:])
        versioner = getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None)
        if versioner is not None and hasattr(versioner, "entries"):
            versioner.entries.pop(name, None)  # the next build of this name starts at version 0 too

    @functools.wraps(original)
    def load_inline(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        for lite in light.plans(dict(bound.arguments)):
            try:
                module = light.load(lite, original)
                steps = ", ".join(f"{k[:-2]} {v:.2f} s" for k, v in module.__kernelcourt_steps__.items())
                note(f"{bound.arguments['name']}: {lite.kind} build ({steps})")
                return module
            except Exception as exc:  # noqa: BLE001 - a failed light build falls back to the next build
                fell_back(lite.marker, str(bound.arguments["name"]), exc)
        plan = split.plan(dict(bound.arguments))
        if plan is None:
            note(f"{bound.arguments['name']}: plain build")
            return original(*args, **kwargs)
        split_args, marker = plan
        try:
            module = original(**split_args)
            note(f"{split_args['name']}: split build")
            return module
        except Exception as exc:  # noqa: BLE001 - a failed split falls back to the plain build
            fell_back(marker, split_args["name"], exc)
            return original(*args, **kwargs)

    cpp_extension.load_inline = load_inline
    return True


