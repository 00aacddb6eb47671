"""What a built extension depends on besides its source, and where builds live: the cache folder,
the toolchain's identity and the content-addressed extension folders. Imported by the parent and
the children alike; it imports nothing of ours.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

_BUILD_MARKERS = ("cpp_extension", "load_inline", "torch.utils.cpp", "cupy", "triton", "ctypes", "cffi", "numba")



def cache_root() -> Path:
    root = Path(os.environ.get("KERNELCOURT_CACHE_DIR") or Path.home() / ".cache" / "kernelcourt")
    root.mkdir(parents=True, exist_ok=True)
    return root


@lru_cache(maxsize=4)
def toolchain_id(device: str) -> str:
    """Everything a built extension depends on besides its own source. A child is handed its
    worker's answer (``child_env``) instead of running the compilers' ``--version`` again."""
    given = os.environ.get(f"KERNELCOURT_TOOLCHAIN_{device.upper()}")
    if given:
        return given
    import torch

    parts = [sys.version.split()[0], torch.__version__, str(torch.version.cuda)]
    for cmd in (["c++", "--version"],) + ((["nvcc", "--version"],) if device == "cuda" else ()):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False).stdout
            parts.append(out.strip().splitlines()[-1] if cmd[0] == "nvcc" else out.splitlines()[0])
        except (OSError, subprocess.SubprocessError, IndexError):
            parts.append(f"{cmd[0]}-missing")
    return "|".join(parts)


def extension_dir(kernel_source: str, device: str, arch: str | None) -> Path:
    key = hashlib.sha256("\0".join([kernel_source, toolchain_id(device), device, arch or ""]).encode()).hexdigest()
    path = cache_root() / "ext" / key[:24]
    path.mkdir(parents=True, exist_ok=True)
    return path


def needs_build(kernel_source: str) -> bool:
    """Only candidates that build or load native code get a separate compile phase."""
    return any(marker in kernel_source for marker in _BUILD_MARKERS)
