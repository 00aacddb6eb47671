"""Split CUDA builds: a candidate's device code compiled without PyTorch's headers.

Most of a CUDA ``load_inline`` build is nvcc's front ends parsing ``torch/types.h``: the kernel's
own code takes well under a second. We split the candidate's CUDA source at its top level:

- device items (``__global__``, ``__device__``, ``__constant__``, ``__shared__``) and what they
  need (preprocessor lines, types, constants) go into a ``.cu`` that includes only CUDA's headers;
- host items (the functions that take ``torch::Tensor`` and launch kernels) join the C++ file,
  which starts with ``torch/extension.h`` and so uses our precompiled header (``build.pch``);
- each launch ``k<<<cfg>>>(args)`` in host code becomes a call of a launcher defined in the ``.cu``
  with the kernel's own parameter list (so the same argument conversions), which launches
  ``k<<<cfg>>>(args)`` there.

The device code is the candidate's own text, compiled by the same nvcc with the same flags, so its
machine code does not change; torch's own ``load_inline`` writes, builds and links both files (``build.inline`` installs it).
What the splitter does not understand (templated kernels, device code that uses torch, code inside
conditional compilation, a kernel taken by address) is left to the plain build, and so is any split
that fails to compile: a failed split costs seconds, never a wrong build.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEVICE_MARK = re.compile(r"\b(__global__|__device__|__constant__|__shared__|__managed__)\b")
TORCH_REF = re.compile(r"\b(?:torch|at|c10|pybind11|py)\s*::|\b(?:TORCH|AT|C10|PYBIND11)_[A-Z0-9_]+\b|\bTensor\b")
HOST_INCLUDE = re.compile(r'#\s*include\s*[<"](?:torch|ATen|c10|pybind11|caffe2)/')
DEVICE_INCLUDE = re.compile(r'#\s*include\s*[<"](?:mma\.h|cooperative_groups|cub/|cuda/|cuda_pipeline|cuda_awbarrier|'
                            r'crt/|sm_\d|cute/|cutlass/|thrust/|curand_kernel)')
CONDITIONAL = re.compile(r"#\s*(if|ifdef|ifndef|elif|else|endif)\b")
TYPE_HEAD = re.compile(r"^\s*(?:template\s*<[^{]*>\s*)?(?:typedef\s+)?(?:struct|class|union|enum)\b")
KEYWORDS = {"const", "volatile", "unsigned", "signed", "int", "float", "double", "char", "long", "short", "bool",
            "void", "auto", "__restrict__", "__restrict", "restrict", "struct", "class"}

KERNEL_PRELUDE = """#include <cuda.h>
#include <cuda_runtime.h>
#include <cstddef>
#include <cstdint>
#include <cfloat>
#include <climits>
#include <cmath>
#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>
"""
HOST_PRELUDE = "#include <cuda.h>\n#include <cuda_runtime.h>\n"
LAUNCH_CONFIG = "struct kernelcourt_launch_config { dim3 grid; dim3 block; size_t shared; cudaStream_t stream; };\n"
CONFIG_HELPER = """static inline kernelcourt_launch_config kernelcourt_config(dim3 grid, dim3 block, size_t shared = 0,
                                                           cudaStream_t stream = 0) {
  return kernelcourt_launch_config{grid, block, shared, stream};
}
"""


class NotSplittable(Exception):
    """The source uses something the splitter leaves to the plain build."""


@dataclass
class Kernel:
    name: str
    params: str  # the parameter list as written (without __grid_constant__)
    names: list[str]


@dataclass
class Split:
    device: str  # the .cu: CUDA headers, device items, shared items, launchers
    host: str  # appended to the C++ file after torch/extension.h and the candidate's cpp_sources
    kernels: list[Kernel] = field(default_factory=list)


# ---- lexing ----------------------------------------------------------------------------------------
def mask(source: str) -> str:
    """The source with comments blanked and string/char literal contents replaced, same length and
    line breaks, so that structure can be found with brackets and regular expressions."""
    out = list(source)
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if source.startswith("//", i):
            j = source.find("\n", i)
            j = n if j == -1 else j
            out[i:j] = " " * (j - i)
            i = j
        elif source.startswith("/*", i):
            j = source.find("*/", i + 2)
            if j == -1:
                raise NotSplittable("unterminated comment")
            for k in range(i, j + 2):
                out[k] = "\n" if source[k] == "\n" else " "
            i = j + 2
        elif c in "\"'":
            if c == '"' and i > 0 and source[i - 1] == "R" and (i < 2 or not (source[i - 2].isalnum() or source[i - 2] == "_")):
                raise NotSplittable("raw string literal")
            j = i + 1
            while j < n and source[j] != c:
                if source[j] == "\\":
                    j += 1
                elif source[j] == "\n":
                    break
                j += 1
            if c == "'" and j - i > 8:  # a digit separator (1'000) rather than a char literal
                i += 1
                continue
            for k in range(i + 1, min(j, n)):
                out[k] = "x"
            i = j + 1
        else:
            i += 1
    return "".join(out)


@dataclass
class Item:
    start: int
    end: int
    kind: str  # "pp" or "code"
    head: str = ""  # code before the item's first top-level brace (masked)
    body: bool = False  # it has a top-level brace block


def top_level_items(masked: str) -> list[Item]:
    items: list[Item] = []
    i, n = 0, len(masked)
    while i < n:
        while i < n and masked[i].isspace():
            i += 1
        if i >= n:
            break
        if masked[i] == "#":
            j = i
            while True:
                e = masked.find("\n", j)
                if e == -1:
                    e = n
                    break
                if masked[i:e].rstrip().endswith("\\"):
                    j = e + 1
                    continue
                break
            items.append(Item(i, e, "pp"))
            i = e
            continue
        depth, j, head_end, to_semicolon = 0, i, None, False
        while j < n:
            c = masked[j]
            if c in "({[":
                if c == "{" and depth == 0 and head_end is None:
                    head_end = j
                    head = masked[i:j]
                    to_semicolon = "=" in head or (bool(TYPE_HEAD.match(head)) and "(" not in head)
                depth += 1
            elif c in ")}]":
                depth -= 1
                if depth < 0:
                    raise NotSplittable("unbalanced brackets")
                if c == "}" and depth == 0 and not to_semicolon:
                    j += 1
                    k = j
                    while k < n and masked[k] in " \t":
                        k += 1
                    if k < n and masked[k] == ";":
                        j = k + 1
                    break
            elif c == ";" and depth == 0:
                j += 1
                break
            elif c == "#" and depth == 0 and masked[:j].rstrip(" \t").endswith("\n"):
                raise NotSplittable("a preprocessor line inside a declaration")
            j += 1
        if depth != 0:
            raise NotSplittable("unbalanced brackets")
        head = masked[i:head_end] if head_end is not None else masked[i:j]
        items.append(Item(i, j, "code", head, head_end is not None))
        i = j
    return items


def _matching(masked: str, open_at: int) -> int:
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    for j in range(open_at, len(masked)):
        c = masked[j]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                raise NotSplittable("unbalanced brackets")
            if not stack:
                return j
    raise NotSplittable("unbalanced brackets")


def _split_commas(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for j, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:j])
            start = j + 1
    parts.append(text[start:])
    return parts


def _kernel(source: str, masked: str, item: Item) -> Kernel:
    head = item.head
    if re.match(r"\s*template\b", head):
        raise NotSplittable("templated kernel")
    cleaned = re.sub(r"__launch_bounds__\s*\(", lambda m: " " * len(m.group(0)), head)
    match = re.search(r"\b([A-Za-z_]\w*)\s*\(", cleaned)
    if not match:
        raise NotSplittable("kernel without a name")
    name = match.group(1)
    open_at = item.start + match.end() - 1
    close_at = _matching(masked, open_at)
    masked_params = masked[open_at + 1:close_at]
    params = source[open_at + 1:close_at]
    names: list[str] = []
    if masked_params.strip() not in ("", "void"):
        for part in _split_commas(masked_params):
            if "=" in part or "(" in part:
                raise NotSplittable("kernel parameter with a default or a function type")
            text = re.sub(r"\[[^\]]*\]\s*$", "", part.strip())
            tokens = re.findall(r"[A-Za-z_]\w*|[*&]", text)
            if len(tokens) < 2 or not re.match(r"[A-Za-z_]", tokens[-1]) or tokens[-1] in KEYWORDS:
                raise NotSplittable("unnamed kernel parameter")
            names.append(tokens[-1])
    else:
        params = ""
    params = re.sub(r"\b__grid_constant__\b", "", params)
    return Kernel(name, params, names)


def _rewrite_launches(source: str, masked: str, item: Item, kernels: dict[str, Kernel]) -> str:
    """The item's text with every ``k<<<cfg>>>(args)`` turned into a launcher call."""
    pieces, cursor = [], item.start
    for match in re.finditer(r"<<<", masked[item.start:item.end]):
        at = item.start + match.start()
        if at < cursor:
            continue
        name_match = re.search(r"([A-Za-z_]\w*)\s*$", masked[item.start:at])
        if not name_match or name_match.group(1) not in kernels:
            raise NotSplittable("a launch of something other than a plain kernel of this file")
        name_at = item.start + name_match.start(1)
        end_cfg = masked.find(">>>", at + 3, item.end)
        if end_cfg == -1:
            raise NotSplittable("unterminated launch configuration")
        k = end_cfg + 3
        while k < item.end and masked[k].isspace():
            k += 1
        if k >= item.end or masked[k] != "(":
            raise NotSplittable("launch without arguments")
        close_at = _matching(masked, k)
        cfg = source[at + 3:end_cfg]
        args = source[k + 1:close_at]
        sep = ", " if masked[k + 1:close_at].strip() else ""
        pieces.append(source[cursor:name_at])
        pieces.append(f"kernelcourt_launch_{name_match.group(1)}(kernelcourt_config({cfg}){sep}{args})")
        cursor = close_at + 1
    pieces.append(source[cursor:item.end])
    return "".join(pieces)


def split_cuda_source(source: str) -> Split:
    """Split one CUDA translation unit; raises NotSplittable for what is left to the plain build."""
    masked = mask(source)
    items = top_level_items(masked)
    kernels: dict[str, Kernel] = {}
    roles: list[str] = []  # per item: "device", "host", "both", or a kernel's name (its definition)
    conditional_depth = 0
    for item in items:
        text = masked[item.start:item.end]
        if item.kind == "pp":
            directive = CONDITIONAL.match(text.lstrip())
            if directive:
                kind = directive.group(1)
                conditional_depth += 1 if kind.startswith("if") else (-1 if kind == "endif" else 0)
                roles.append("both")
            elif HOST_INCLUDE.match(text.lstrip()):
                roles.append("host")
            elif DEVICE_INCLUDE.match(text.lstrip()):
                roles.append("device")
            else:
                roles.append("both")
            continue
        if conditional_depth:
            raise NotSplittable("code inside conditional compilation")
        is_namespace = re.match(r"\s*(?:inline\s+)?namespace\b|\s*extern\s+\"", text) is not None
        if "__global__" in text:
            if is_namespace:
                raise NotSplittable("a kernel inside a namespace or extern block")
            if TORCH_REF.search(text):
                raise NotSplittable("device code that uses torch")
            if item.body:
                kernel = _kernel(source, masked, item)
                if kernel.name in kernels or kernel.name in ("device", "host", "both"):
                    raise NotSplittable("overloaded kernel")
                kernels[kernel.name] = kernel
                roles.append(kernel.name)
            else:
                roles.append("device")
        elif DEVICE_MARK.search(text):
            if TORCH_REF.search(text):
                raise NotSplittable("device code that uses torch")
            roles.append("device")
        elif "<<<" in text or TORCH_REF.search(text):
            roles.append("host")
        elif item.body and not TYPE_HEAD.match(item.head) and "=" not in item.head:
            # a function definition, namespace or extern block
            if is_namespace:
                has_function = re.search(r"\)\s*(?:const\s*)?(?:noexcept\s*)?\{", text) is not None
                roles.append("host" if has_function else "both")
            else:
                roles.append("both" if re.search(r"\bconstexpr\b", item.head) else "host")
        elif _is_mutable_variable(text):
            roles.append("host")
        else:
            roles.append("both")
    if conditional_depth:
        raise NotSplittable("unbalanced conditional compilation")
    if not kernels:
        raise NotSplittable("no kernel definition")

    device_parts, host_parts = [KERNEL_PRELUDE, LAUNCH_CONFIG], [HOST_PRELUDE, LAUNCH_CONFIG, CONFIG_HELPER]
    for item, role in zip(items, roles):
        text = source[item.start:item.end]
        if role != "host":
            device_parts.append(text)
        if role in kernels:
            host_parts.append(_launcher_signature(kernels[role]) + ";")
        elif role == "host":
            host_text = (_rewrite_launches(source, masked, item, kernels) if "<<<" in masked[item.start:item.end]
                         else text)
            used = set(re.findall(r"\b[A-Za-z_]\w*\b", mask(host_text))) & set(kernels)
            if used:  # e.g. cudaFuncSetAttribute(k, ...): the kernel's host stub lives in the .cu
                raise NotSplittable(f"host code refers to kernel {sorted(used)[0]} other than by launching it")
            host_parts.append(host_text)
        elif role == "both":
            host_parts.append(text)
    for kernel in kernels.values():
        call = ", ".join(kernel.names)
        device_parts.append(f"{_launcher_signature(kernel)} {{\n  {kernel.name}<<<config.grid, config.block, "
                            f"config.shared, config.stream>>>({call});\n}}")
    return Split("\n".join(device_parts) + "\n", "\n".join(host_parts) + "\n", list(kernels.values()))


def _launcher_signature(kernel: Kernel) -> str:
    params = f", {kernel.params}\n" if kernel.params.strip() else ""
    return f"void kernelcourt_launch_{kernel.name}(kernelcourt_launch_config config{params})"


def _is_mutable_variable(text: str) -> bool:
    """A definition of a non-const global (one copy only: it stays with the host code)."""
    stripped = text.strip()
    if re.match(r"(?:template|typedef|using|struct|class|union|enum|namespace|extern|static_assert)\b", stripped):
        return False
    if re.search(r"\b(?:const|constexpr|static)\b", stripped):
        return False
    head = stripped.split("=", 1)[0]
    return not re.search(r"\)\s*(?:const\s*)?(?:noexcept\s*)?;?\s*$", head)  # not a prototype


# ---- the split build's load_inline arguments -------------------------------------------------------
def plan(arguments: dict[str, Any]) -> tuple[dict[str, Any], Path] | None:
    """load_inline's arguments for the split build of this call and its failure marker, or None."""
    if os.environ.get("KERNELCOURT_SPLIT", "1") == "0":
        return None
    cuda_sources = arguments.get("cuda_sources")
    if not cuda_sources or arguments.get("no_implicit_headers") or arguments.get("build_directory") \
            or arguments.get("sycl_sources") or arguments.get("use_pch"):
        return None
    name = str(arguments["name"])
    if not re.fullmatch(r"[A-Za-z_]\w*", name):
        return None
    build_dir = Path(os.environ["TORCH_EXTENSIONS_DIR"]) / "kernelcourt-split" / name
    marker = build_dir / "split-failed.log"
    if marker.exists():
        return None
    joined = "\n".join([cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources))
    try:
        split = split_cuda_source(joined)
    except NotSplittable:
        return None
    cpp_sources = arguments.get("cpp_sources") or []
    cpp = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources)
    build_dir.mkdir(parents=True, exist_ok=True)
    arguments.update(cpp_sources=["#include <torch/extension.h>", *cpp, split.host], cuda_sources=[split.device],
                     build_directory=str(build_dir), no_implicit_headers=True)
    return arguments, marker
