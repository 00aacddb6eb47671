"""The ``compile`` role: import the candidate with the GPU hidden, so that its extensions build into
the cache that the run phase loads from."""

from __future__ import annotations

import os
import sys
from typing import Any

from .harden import confine_candidate_code
from .sender import Sender, is_build_error, short_traceback


def role_compile(setup: dict[str, Any], send: Sender) -> None:
    import time

    from ..build import inline
    from ..tasks import exec_source

    start = time.perf_counter()
    for key, value in (setup.get("env") or {}).items():  # this build's folders and flags (a spare started
        if value is None:                                  # before they were known)
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    from ..build import light

    if inline.install() and light.enabled():
        try:  # the bridge is ours: built (once per toolchain) or loaded before the confinement
            light.bridge_module(setup.get("device") == "cuda")
        except Exception as exc:  # noqa: BLE001 - the light build will fail over to the next build
            print(f"[kernelcourt] no light-build bridge: {exc}"[:2000], file=sys.stderr, flush=True)
    if int(setup.get("nice") or 0) > 0:  # after the bridge, which every first build waits for
        os.nice(int(setup["nice"]))      # inherited by the compilers this child runs
    confine_candidate_code(setup["kernel_source"])
    try:
        exec_source(setup["kernel_source"], "kernelcourt_candidate", "<kernel>")
    except BaseException as exc:  # noqa: BLE001 - candidate code
        send("compile_failed", build_error=is_build_error(exc), error=short_traceback(exc))
        return
    elapsed = time.perf_counter() - start
    print(f"[kernelcourt] the compile child ran the candidate's module in {elapsed:.2f} s", file=sys.stderr, flush=True)
    send("compiled", ms=elapsed * 1e3)
