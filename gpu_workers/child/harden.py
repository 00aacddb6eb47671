"""The child's own process limits, set first thing in ``main``, and the write confinement set up
before any candidate code runs (``confine``)."""

from __future__ import annotations

import os
import resource
import sys


def harden_process() -> None:
    keep_to_cpus()
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limit = int(os.environ.get("KA_ADDRESS_LIMIT", "0") or 0)
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)  # die with the parent
    except (OSError, AttributeError):
        pass


def keep_to_cpus() -> None:
    """This process on the CPUs the parent gave its children (``KERNELCOURT_CHILD_CPUS``:
    ``hardware.child_cpus``), before it starts a thread: every thread, compiler and compile worker it
    starts inherits them. The parent alone puts a timing thread on a timing CPU (``pairing``)."""
    given = os.environ.get("KERNELCOURT_CHILD_CPUS", "")
    try:
        cpus = {int(part) for part in given.split(",") if part.strip()}
        if cpus:
            os.sched_setaffinity(0, cpus)
    except (ValueError, OSError):  # a CPU this process may not use: it keeps what it was given
        pass


def confine_candidate_code(kernel_source: str) -> list[str]:
    """Before any candidate code runs in this process: writes only beneath its own working folder,
    its build folder, its own compiler caches and /dev (``confine``). The compiler caches
    (``torch.compile``, Triton) are this source's alone (``<cache>/candidates/<source hash>``): a
    candidate cannot plant a cache entry that another candidate's compile would pick up. The
    reference's ``torch.compile`` cache, other candidates' builds and caches, the bridge and the kept
    timings are out of reach. Returns the folders it may write (where its own native code can come
    from: watch.candidate_ops, linkage.candidate_objects)."""
    import hashlib

    from . import confine

    shared = os.environ.get("KERNELCOURT_CACHE_DIR")
    allowed = [os.getcwd(), "/dev"]
    if shared:
        key = hashlib.sha256(kernel_source.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        caches = os.path.join(shared, "candidates", key)
        for name, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
            os.environ[name] = os.path.join(caches, sub)
            os.makedirs(os.environ[name], exist_ok=True)
        allowed.append(caches)
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        allowed.append(os.environ["TORCH_EXTENSIONS_DIR"])
    print(f"[kernelcourt] {confine.confine_writes(allowed)}", file=sys.stderr, flush=True)
    return allowed
