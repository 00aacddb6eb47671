"""Faster extension builds without touching what candidates write.

Most of a ``load_inline`` build is g++ parsing ``torch/extension.h`` (tens of seconds), not the
candidate's own code. We precompile that header once per toolchain into our cache and put its folder
on ``CPATH`` for the compile and run children: ``CPATH`` folders are searched before the
``-isystem`` folders torch passes, so GCC finds ``torch/extension.h.gch`` there and uses it when
the build's flags match (it silently falls back to the real header, via a symlink beside it, when
they do not). Results are identical: the same header, the same flags, the same compiler.

The light build's stand-in for that header (``lite/include/torch/extension.h``: the standard
library's headers, about 90k lines, half of a light host unit's second) is precompiled the same way
(``kind="lite"``); ``build.light`` puts its folder before the light headers' own.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sysconfig
import threading
from functools import lru_cache
from pathlib import Path

from .light import INCLUDE, host_flags


def _torch_include() -> Path:
    import torch

    return Path(torch.__file__).parent / "include"


def _compiler() -> str | None:
    return _gcc(os.environ.get("CXX", "c++"), os.environ.get("PATH", ""))


@lru_cache(maxsize=8)
def _gcc(cxx: str, search_path: str) -> str | None:
    """The compiler's path if it is GCC (asked once per process and setting)."""
    path = shutil.which(cxx, path=search_path or None)
    if not path:
        return None
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return path if ("g++" in version or "GCC" in version or "Free Software" in version) else None


def _torch_cxx_standard() -> str:
    """The ``-std=`` torch's JIT builds give g++ (C++17 up to torch 2.9, C++20 since): a header
    precompiled under another standard would be silently skipped."""
    import inspect
    import re

    from torch.utils import cpp_extension

    try:
        source = inspect.getsource(cpp_extension._write_ninja_file_to_build_library)
    except (AttributeError, OSError, TypeError):
        return "-std=c++17"
    match = re.search(r"-std=c\+\+\d+", source)
    return match.group(0) if match else "-std=c++17"


def pch_flags(device: str) -> list[str]:
    """The flags torch's ``load_inline`` gives g++ for a C++ source (minus the extension name)."""
    from torch.utils.cpp_extension import include_paths

    flags = ["-DTORCH_API_INCLUDE_EXTENSION_H"]
    for path in include_paths("cuda" if device == "cuda" else "cpu"):
        flags += ["-isystem", path]
    flags += ["-isystem", sysconfig.get_path("include"), "-fPIC", _torch_cxx_standard()]
    return flags


def pch_enabled() -> bool:
    """``KERNELCOURT_PCH=0`` turns the precompiled header off (builds then run as plain ``load_inline``)."""
    return os.environ.get("KERNELCOURT_PCH", "1") != "0"


_building: dict[Path, threading.Thread] = {}  # this process's background header builds, by folder
_building_lock = threading.Lock()


def pch_dir(cache_root: Path, device: str, *, wait: bool = True, kind: str = "torch") -> Path | None:
    """A folder holding ``torch/extension.h.gch`` for this toolchain, built on first use; None if
    the compiler is not GCC or the build fails (builds then run as plain ``load_inline`` does).
    ``kind``: "torch" (torch's header) or "lite" (the light build's stand-in).

    With ``wait=False`` a header not built yet is built on a background thread and None comes back
    at once: an evaluation never waits for a header (torch's takes ~25 s, and only a fallback build
    uses it; the light one ~3 s). A worker's warm-up waits for both."""
    place = _pch_place(cache_root, device, kind)
    if place is None:
        return None
    folder, target, compiler, header, flags = place
    if target.exists():
        return folder
    if (folder / "failed.log").exists():
        return None  # this toolchain cannot precompile the header: don't retry on every build
    if not wait:
        with _building_lock:
            if folder not in _building or not _building[folder].is_alive():
                _building[folder] = threading.Thread(target=pch_dir, args=(cache_root, device),
                                                     kwargs={"kind": kind}, name="kernelcourt-pch", daemon=True)
                _building[folder].start()
        return None
    (folder / "torch").mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build per toolchain, however many workers start at once
        try:
            if target.exists():
                return folder
            link = folder / "torch" / "extension.h"
            if not link.exists():
                link.symlink_to(header)
            partial = folder / "torch" / f"extension.h.gch.{os.getpid()}"
            result = subprocess.run([compiler, "-x", "c++-header", str(header), "-o", str(partial), *flags],
                                    capture_output=True, text=True, timeout=1800, check=False)
            if result.returncode != 0:
                partial.unlink(missing_ok=True)
                (folder / "failed.log").write_text(result.stderr[-20000:])
                return None
            os.replace(partial, target)  # atomic: a reader sees no file or the whole file
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return folder


def _lite_include() -> Path:
    return INCLUDE


def lite_pch_flags(device: str) -> list[str]:
    """The flags a light build gives g++ for its host unit (``light.plans``), minus the extension name."""
    return ["-I", str(_lite_include())] + pch_flags(device) + host_flags(device == "cuda")


@lru_cache(maxsize=1)
def _lite_stamp() -> str:
    """Our light headers change with our code: their contents name the build, not their times."""
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(_lite_include().parent.rglob("*.h")))).hexdigest()


def _pch_place(cache_root: Path, device: str, kind: str = "torch") -> tuple[Path, Path, str, Path, list[str]] | None:
    """Where ``pch_dir`` keeps this toolchain's header (the folder, the .gch file) and how it builds
    it (the compiler, the header, the flags); None where it cannot (no GCC, no header)."""
    compiler = _compiler()
    if kind == "lite":
        header = _lite_include() / "torch" / "extension.h"
        flags = lite_pch_flags(device)
        stamp = _lite_stamp()
    else:
        header = _torch_include() / "torch" / "extension.h"
        flags = pch_flags(device)
        stamp = str(header.stat().st_mtime_ns) if header.exists() else ""
    if compiler is None or not header.exists():
        return None
    key = hashlib.sha256("\0".join([compiler, str(header), stamp, *flags]).encode())
    folder = cache_root / "pch" / (("lite-" if kind == "lite" else "") + key.hexdigest()[:20])
    return folder, folder / "torch" / "extension.h.gch", compiler, header, flags
