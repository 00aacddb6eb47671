"""Light builds: a candidate's host code compiled against light headers, in about a second.

Even with a precompiled header, g++ spends several seconds on every unit that includes
``torch/extension.h`` (template instantiation at the end of the unit; no header cache removes it).
The candidate's own host code is short. So we compile it against ``lite/include``: stand-ins for the
PyTorch headers candidates include, which declare the everyday C++ API (``kernelcourt_lite.h``).
Every call goes to PyTorch itself through a bridge extension built once per toolchain
(``lite/bridge.cpp``): tensor queries read the real tensor, operators run through PyTorch's dispatcher
by schema name, the stream is PyTorch's current stream. A CUDA source is split first (``build.split``:
its device half through nvcc with CUDA's headers only, its host half with the C++ code); one the
splitter leaves alone (templated kernels, kernels used other than by launching) is compiled whole by
nvcc against the same light headers, so AT_DISPATCH and templates work as written.

torch's ``load_inline`` still writes, builds (same flags, same ninja) and loads the library; the bridge
binds the functions the candidate's ``PYBIND11_MODULE`` (or ``functions=``) defines and converts
arguments and results as pybind11 would. Code that needs more than the light headers offer fails to
compile in about a second and takes the split build, then the plain one, so what a candidate may write
is not narrowed and results are those of the same kernels and the same PyTorch operators.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import re
import sys
import time
import types
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .split import NotSplittable, split_cuda_source
from .toolchain import cache_root, toolchain_id

LITE = Path(__file__).resolve().parent / "lite"
INCLUDE = LITE / "include"
ABI = LITE / "abi"
TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]((?:torch|ATen|c10|pybind11|caffe2)/[^>"]+)[>"]', re.M)
# what the light headers cannot stand in for: custom operator registration, autograd, Python objects
NOT_LITE = re.compile(r"\bTORCH_LIBRARY\w*|\bautograd\b|\bpy::(?:object|module_::import|class_|handle|array)|"
                      r"\bc10::intrusive_ptr|\bat::native\b|\bPYBIND11_(?!MODULE\b)\w+")


@lru_cache(maxsize=1)
def shadowed_headers() -> frozenset[str]:
    return frozenset(str(p.relative_to(INCLUDE)) for p in INCLUDE.rglob("*.h") if p.parent != INCLUDE)


def lite_source_problem(host: str) -> str | None:
    """Why this host code cannot take the light build (None: it may; the compiler has the last word)."""
    for match in TORCH_INCLUDE.finditer(host):
        if match.group(1) not in shadowed_headers():
            return f"includes <{match.group(1)}>"
    found = NOT_LITE.search(host)
    return f"uses {found.group(0)}" if found else None


def module_definition(functions: Any) -> str:
    """The binding torch's ``load_inline`` generates for ``functions=`` (same text, same names)."""
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, list):
        functions = {f: f for f in functions}
    if not isinstance(functions, dict):
        raise ValueError(f"Expected 'functions' to be a list or dict, but was {type(functions)}")
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    lines += [f'm.def("{name}", torch::wrap_pybind_function({name}), "{doc}");' for name, doc in functions.items()]
    return "\n".join(lines + ["}"])


@dataclass
class LitePlan:
    kind: str  # "light+split" or "light"
    arguments: dict[str, Any]
    marker: Path


def enabled() -> bool:
    """Light builds are tried in this process: one of our children (it has an extensions folder),
    unless ``KERNELCOURT_LITE=0``."""
    return os.environ.get("KERNELCOURT_LITE", "1") != "0" and bool(os.environ.get("TORCH_EXTENSIONS_DIR"))


def host_flags(with_cuda: bool) -> list[str]:
    """What a light build adds to g++'s flags for its host unit (its precompiled header, built by
    ``build.pch``, must be made with the same)."""
    return ["-fvisibility=hidden"] + (["-DKA_LITE_CUDA"] if with_cuda else [])


def plans(arguments: dict[str, Any]) -> list[LitePlan]:
    """load_inline's arguments for the light builds of this call, fastest first (none where they do
    not apply, or where an earlier attempt at this name failed):

    - light+split: the CUDA source split (``build.split``); the device half compiled by nvcc with
      CUDA's headers only, the host half with the C++ sources against the light headers;
    - light: the CUDA source compiled whole by nvcc against the light headers (templated kernels,
      kernels used other than by launching, ...), or a C++-only extension.
    """
    if not enabled():
        return []
    if arguments.get("no_implicit_headers") or arguments.get("build_directory") or arguments.get("sycl_sources") \
            or arguments.get("use_pch") or not arguments.get("is_python_module", True):
        return []
    name = str(arguments["name"])
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return []
    cpp_sources = arguments.get("cpp_sources") or []
    host_parts = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
    cuda_sources = arguments.get("cuda_sources") or []
    device_parts = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources)
    binding = module_definition(arguments["functions"]) if arguments.get("functions") is not None else ""
    host = "\n".join(["#include <torch/extension.h>", *host_parts, binding])
    # The CUDA unit gets what load_inline would put first, from the light headers too.
    device = "\n".join(["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>", *device_parts])
    everything = host + ("\n" + device if device_parts else "")
    if "PYBIND11_MODULE" not in everything or lite_source_problem(everything) is not None:
        return []
    with_cuda = bool(device_parts) if arguments.get("with_cuda") is None else bool(arguments["with_cuda"])
    cflags = list(arguments.get("extra_cflags") or []) + host_flags(with_cuda)
    cuda_cflags = list(arguments.get("extra_cuda_cflags") or [])
    if with_cuda:
        cuda_cflags += ["-DKA_LITE_CUDA", "-Xcompiler", "-fvisibility=hidden"]
    common = dict(arguments)
    common.update(functions=None, extra_cflags=cflags, extra_cuda_cflags=cuda_cflags,
                  extra_include_paths=[*_precompiled(), str(INCLUDE), *(arguments.get("extra_include_paths") or [])],
                  no_implicit_headers=True, is_python_module=False, with_cuda=with_cuda)
    root = Path(os.environ["TORCH_EXTENSIONS_DIR"])
    out: list[LitePlan] = []

    def add(kind: str, folder: str, cpp: str, cuda: str | None) -> None:
        build_dir = root / folder / name
        marker = build_dir / "lite-failed.log"
        if marker.exists():
            return
        build_dir.mkdir(parents=True, exist_ok=True)
        out.append(LitePlan(kind, {**common, "cpp_sources": [cpp], "cuda_sources": [cuda] if cuda else None,
                                   "build_directory": str(build_dir)}, marker))

    if device_parts and os.environ.get("KERNELCOURT_SPLIT", "1") != "0":
        try:
            split = split_cuda_source("\n".join(device_parts))
        except NotSplittable:
            split = None
        if split is not None:
            add("light+split", "kernelcourt-lite-split",
                "\n".join(["#include <torch/extension.h>", *host_parts, split.host, binding]), split.device)
    add("light", "kernelcourt-lite", host, device if device_parts else None)
    return out


def _precompiled() -> list[str]:
    """The folder of the light ``torch/extension.h`` precompiled for this toolchain (``build.pch``,
    ``kind="lite"``), searched before the light headers: g++ takes the ``.gch`` where the build's
    flags match and the header itself (a link beside it) where they do not; nvcc's units see only
    the link. Empty where none is ready (``KERNELCOURT_LITE_PCH`` names it)."""
    folder = os.environ.get("KERNELCOURT_LITE_PCH", "")
    return [folder] if folder and (Path(folder) / "torch" / "extension.h.gch").is_file() else []


def load(lite: LitePlan, load_inline: Any) -> types.ModuleType:
    """Build (or find built) and bind; raises on any failure (the caller falls back). The seconds
    each step took are kept in ``module.__kernelcourt_steps__`` (the compile log shows them)."""
    started = time.perf_counter()
    bridge = bridge_module(bool(lite.arguments.get("with_cuda")))
    bridged = time.perf_counter()
    path = load_inline(**lite.arguments)
    built = time.perf_counter()
    module = types.ModuleType(str(lite.arguments["name"]))
    module.__file__ = str(path)
    for name, function in bridge.bind(str(path)):
        setattr(module, name, function)
    module.__kernelcourt_steps__ = {"bridge_s": bridged - started, "build_and_load_s": built - bridged,
                                    "bind_s": time.perf_counter() - built}
    return module


# ---- the bridge, built once per toolchain -------------------------------------------------------------
def _bridge_source() -> str:
    return (LITE / "bridge.cpp").read_text()


@lru_cache(maxsize=2)
def bridge_module(with_cuda: bool) -> types.ModuleType:
    """The bridge extension for this toolchain, built into the cache on first use (under a lock)."""
    from torch.utils import cpp_extension

    source = _bridge_source()
    # Optimised: every call of a light-built function goes through it, and torch's load_inline adds no
    # -O of its own (at -O0 the bridge cost ~25 µs per call that allocates, where torch's own ~1 µs).
    cflags = ["-O3"] + (["-DKA_WITH_CUDA"] if with_cuda else [])
    key = hashlib.sha256("\0".join([source, (ABI / "kernelcourt_abi.h").read_text(), " ".join(cflags),
                                    toolchain_id("cuda" if with_cuda else "cpu"), str(with_cuda)]).encode())
    name = f"kernelcourt_bridge_{key.hexdigest()[:16]}"
    folder = cache_root() / "lite" / name
    folder.mkdir(parents=True, exist_ok=True)
    existing = sys.modules.get(name)
    if existing is not None:
        return existing
    done, failed = folder / "bridge.ok", folder / "bridge-failed.log"
    if not done.exists():
        with open(folder / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one build per toolchain, however many children ask
            if failed.exists():
                raise RuntimeError(f"the light-build bridge failed to build earlier: see {failed}")
            if not done.exists():
                try:
                    module = cpp_extension.load_inline(
                        name=name, cpp_sources=[source], build_directory=str(folder), extra_include_paths=[str(ABI)],
                        with_cuda=with_cuda, extra_cflags=cflags, verbose=False)
                except Exception as exc:
                    failed.write_text(f"{type(exc).__name__}: {exc}"[-20000:])
                    raise
                done.touch()
                sys.modules[name] = module
                return module
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.so")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the light-build bridge from {folder}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module
