"""What library code a candidate's native objects bind or look up (REWARD_HACKS family 19).

The op tracer and the profiler see what goes through PyTorch's dispatcher. Native code can reach
compute without it: ``at::cpu::``/``at::native::`` functions, BLAS or oneDNN symbols declared by
hand (libtorch exports many of them), or a symbol looked up at run time. Whatever the spelling in the
source, a shared object names what it binds in its dynamic symbol table (its undefined symbols and
the libraries it needs), and run-time lookups need ``dlsym`` or a walk of the loader's list, which it
must import. So this module reads those tables (a small pure-Python ELF reader: no tool, no code of
the candidate's runs) and classifies every binding by WHAT it reaches, not how it was written:

* ``compute``: an ATen operator that is not an allocation/view/copy (``at::_ops::<op>``, ``at::<op>``,
  ``at::cpu::<op>``, ``at::native::…``, ``torch::<op>``, ``Tensor::<op>``, AOTInductor's
  ``aoti_torch_*_<op>`` shims), BLAS/LAPACK, oneDNN/MKL/cuBLAS/cuDNN/… functions or libraries;
* ``lookup``: run-time symbol lookup (``dlsym``, ``dlopen``, ``dl_iterate_phdr``, ``_r_debug``…): the
  object can bind anything, so on the strict track that is a finding too;
* ``allowed``: everything else (tensor metadata and allocation, c10 utilities, libc, pybind11, CUDA's
  runtime, the light bridge's table, which reaches operators only through the dispatcher, where the
  profiler sees them).

ATen operator names come from PyTorch's own registry (``torch._C._dispatch_get_all_op_names``), so a
new operator is classified without a new rule.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..rules import ALLOCATION_AND_VIEW_OPS

LOOKUP_SYMBOLS = frozenset({
    "dlsym", "dlvsym", "dlopen", "dlmopen", "dl_iterate_phdr", "dladdr", "dladdr1", "dlinfo", "_r_debug",
    "_dl_sym", "__libc_dlsym", "__libc_dlopen_mode", "_dl_find_object", "__dlsym", "__dlopen",
})
# Libraries whose every function is library compute.
_COMPUTE_LIBRARY = re.compile(
    r"^lib(cublas|cublasLt|cudnn\w*|cufft\w*|cusparse\w*|cusolver\w*|curand|cutensor\w*|nvblas|openblas\w*|"
    r"blas\w*|cblas|lapack\w*|mkl_\w+|mkl|dnnl|mkldnn|onednn|flexiblas|blis|armpl\w*|fbgemm|xnnpack|"
    r"qnnpack|nnpack|torch_cuda_linalg|magma\w*)\b")
# C-named BLAS/LAPACK entry points (Fortran style with a trailing underscore, and the C interfaces).
_BLAS_C = re.compile(
    r"^(cblas_|LAPACKE_|lapacke_|mkl_|MKL_|dnnl_|mkldnn_|cublas|cudnn|cufft|cusparse|cusolver|cutensor|"
    r"openblas_|goto_|bli_|fbgemm|xnn_|pytorch_qnnp_|nnp_)"
    r"|^(?i:(s|d|c|z|cs|zd|sc|dz|is|id|ic|iz)(gemm\w*|gemv|ger[cu]?|symm|symv|syrk|syr2k|syr2?|trmm|trmv|trsm|"
    r"trsv|hemm|hemv|herk|her2k|axpy|axpby|dot[cu]?|nrm2|asum|scal|copy|swap|rotm?g?|amax|amin|[gs]bmv|spmv|"
    r"[tp][bp]mv|getr[fsi]|potr[fsi]|gesv|gesvd|gesdd|geqrf|orgqr|ormqr|syevd?|heevd?|gels[dy]?|trtrs|"
    r"gees|geev|sytrf|hetrf|pstrf|lauum|trtri|gbsv|gtsv|posv|imatcopy|omatcopy)"
    r"(_batch\w*|_compute\w*|_pack\w*|_strided\w*)?(_64)?_?)$")  # MKL inside libtorch exports SGEMM, SGEMM_64…
# Namespaces (first component of a mangled name) that are compute libraries.
_COMPUTE_NAMESPACES = frozenset({"dnnl", "mkldnn", "ideep", "mkl", "cublas", "cudnn", "fbgemm", "xnnpack",
                                 "qnnpack", "pytorch_qnnp", "nnpack", "magma", "onednn", "cudnn_frontend"})
# Components anywhere in an ``at::``/``torch::`` name that put it in a compute library.
_COMPUTE_COMPONENTS = frozenset({"native", "cpublas", "blas", "mkldnn", "mkl", "cudnn", "linalg", "fft", "sparse",
                                 "onednn", "vec", "detail_blas", "cublas", "_ops_impl"})
# ``at::<backend>::<op>``: the operator's kernel for one backend, below the dispatcher.
_BACKEND_NAMESPACES = frozenset({"cpu", "cuda", "meta", "mps", "xpu", "compositeexplicitautograd",
                                 "compositeimplicitautograd", "compositeexplicitautogradnonfunctional",
                                 "compositeimplicitautogradnestedtensor", "sparsecpu", "sparsecuda",
                                 "quantizedcpu", "quantizedcuda", "mkldnncpu"})
_HANDLE = re.compile(r"(?i)blas|solver|sparse|cudnn|cufft|lt_?handle|dnnl|mkl")


@dataclass
class Binding:
    symbol: str
    kind: str  # "compute" | "lookup" | "allowed"
    reason: str = ""


@dataclass
class ObjectReport:
    path: str
    readable: bool = True
    error: str = ""
    needed: list[str] = field(default_factory=list)
    bindings: list[Binding] = field(default_factory=list)

    @property
    def compute(self) -> list[Binding]:
        return [b for b in self.bindings if b.kind == "compute"]

    @property
    def lookups(self) -> list[Binding]:
        return [b for b in self.bindings if b.kind == "lookup"]


# ---- a minimal ELF reader ------------------------------------------------------------------------
class ElfError(ValueError):
    pass


def read_dynamic(data: bytes) -> tuple[list[str], list[str]]:
    """(undefined dynamic symbols, DT_NEEDED libraries) of an ELF shared object."""
    if data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    klass, order = data[4], data[5]
    if klass not in (1, 2) or order not in (1, 2):
        raise ElfError("unknown ELF class or byte order")
    wide = klass == 2
    end = "<" if order == 1 else ">"
    if wide:
        shoff, = struct.unpack_from(end + "Q", data, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x3A)
        sh_fmt, sym_fmt, dyn_fmt = end + "IIQQQQIIQQ", end + "IBBHQQ", end + "qQ"
    else:
        shoff, = struct.unpack_from(end + "I", data, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", data, 0x2E)
        sh_fmt, sym_fmt, dyn_fmt = end + "IIIIIIIIII", end + "IIIBBH", end + "iI"
    if not shoff or not shnum or shoff + shnum * shentsize > len(data):
        raise ElfError("no section headers (a stripped or hand-made object: its bindings cannot be read)")
    sections = [struct.unpack_from(sh_fmt, data, shoff + i * shentsize) for i in range(shnum)]

    def strings(index: int) -> bytes:
        sec = sections[index]
        offset, size = sec[4], sec[5]
        return data[offset:offset + size]

    def name_at(table: bytes, offset: int) -> str:
        stop = table.find(b"\0", offset)
        return table[offset:stop if stop >= 0 else len(table)].decode("utf-8", "replace")

    undefined: list[str] = []
    needed: list[str] = []
    found_dynsym = False
    for sec in sections:
        sh_type, offset, size, link, entsize = sec[1], sec[4], sec[5], sec[6], sec[9]
        if sh_type == 11 and entsize:  # SHT_DYNSYM
            found_dynsym = True
            table = strings(link)
            for pos in range(offset + entsize, offset + size, entsize):  # entry 0 is the null symbol
                fields = struct.unpack_from(sym_fmt, data, pos)
                st_name = fields[0]
                st_shndx = fields[3] if wide else fields[5]
                if st_shndx == 0 and st_name:
                    undefined.append(name_at(table, st_name))
        elif sh_type == 6 and entsize:  # SHT_DYNAMIC
            table = strings(link)
            for pos in range(offset, offset + size, entsize):
                tag, value = struct.unpack_from(dyn_fmt, data, pos)
                if tag == 0:
                    break
                if tag == 1:  # DT_NEEDED
                    needed.append(name_at(table, value))
    if not found_dynsym:
        raise ElfError("no dynamic symbol table")
    return undefined, needed


# ---- classification ------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _aten_ops() -> dict[str, str]:
    """Every registered ATen operator's C++ struct name (``add_Tensor``) and base name (``add``)
    -> its base name."""
    import torch

    ops: dict[str, str] = {}
    for full in torch._C._dispatch_get_all_op_names():
        namespace, _, rest = full.partition("::")
        if namespace not in ("aten", "prims"):
            continue
        base, _, overload = rest.partition(".")
        ops[base] = base
        if overload:
            ops[f"{base}_{overload}"] = base
    return ops


_ALLOWED_OPS = frozenset(ALLOCATION_AND_VIEW_OPS)


def _op_kind(name: str) -> tuple[str, str] | None:
    """("compute"|"allowed", op) when ``name`` is an ATen operator's name or struct name."""
    base = _aten_ops().get(name)
    if base is None and name.endswith("_out"):
        base = _aten_ops().get(name[:-4])
    if base is None:
        return None
    return ("allowed" if base in _ALLOWED_OPS else "compute"), base


def nested_name(symbol: str) -> list[str]:
    """The leading name components of an Itanium-mangled C++ symbol (``_ZN2at4_ops2mm4callE…`` ->
    ``['at', '_ops', 'mm', 'call']``), up to the first template or special name; [] for C names."""
    if not symbol.startswith("_Z"):
        return []
    i = 2
    if symbol.startswith("L", i):
        i += 1
    nested = symbol.startswith("N", i)
    if nested:
        i += 1
        while i < len(symbol) and symbol[i] in "rVKRO":
            i += 1
    parts: list[str] = []
    if symbol.startswith("St", i):
        parts.append("std")
        i += 2
    while i < len(symbol) and symbol[i].isdigit():
        j = i
        while j < len(symbol) and symbol[j].isdigit():
            j += 1
        length = int(symbol[i:j])
        parts.append(symbol[j:j + length])
        i = j + length
        if not nested:
            break
    return parts


def classify(symbol: str) -> Binding:
    if symbol in LOOKUP_SYMBOLS or symbol.split("@")[0] in LOOKUP_SYMBOLS:
        return Binding(symbol, "lookup", "looks symbols up at run time")
    parts = nested_name(symbol)
    if not parts:
        plain = symbol.split("@")[0]
        if _BLAS_C.search(plain):
            return Binding(symbol, "compute", "a BLAS/LAPACK or vendor-library function")
        if plain.startswith("aoti_torch_"):
            rest = re.sub(r"^(cpu|cuda|xpu|mps)_", "", plain[len("aoti_torch_"):])
            kind = _op_kind(rest)
            if kind and kind[0] == "compute":
                return Binding(symbol, "compute", f"ATen operator {kind[1]} (AOTInductor shim)")
        return Binding(symbol, "allowed")
    head = parts[0]
    if head in _COMPUTE_NAMESPACES:
        return Binding(symbol, "compute", f"{head}:: (a compute library)")
    if head not in ("at", "torch"):
        return Binding(symbol, "allowed")
    path = "::".join(parts)
    if len(parts) >= 3 and parts[1] == "_ops":
        kind = _op_kind(parts[2])
        if kind is not None:
            return Binding(symbol, kind[0], f"ATen operator {kind[1]} ({path})")
        return Binding(symbol, "compute", f"an ATen operator entry ({path})")
    if any(p in _COMPUTE_COMPONENTS for p in parts[1:-1]) or (len(parts) > 1 and parts[1] in _COMPUTE_COMPONENTS):
        kind = _op_kind(parts[-1])
        if kind is not None and kind[0] == "allowed":
            return Binding(symbol, "allowed")
        return Binding(symbol, "compute", f"{path} (below the dispatcher)")
    if len(parts) >= 3 and parts[1] in _BACKEND_NAMESPACES:
        kind = _op_kind(parts[2])
        if kind is not None:
            return Binding(symbol, kind[0], f"ATen operator {kind[1]}'s {parts[1]} kernel ({path})")
        if _HANDLE.search(parts[2]):
            return Binding(symbol, "compute", f"a vendor-library handle ({path})")
        return Binding(symbol, "allowed")
    name = parts[-1]
    kind = _op_kind(name)
    if kind is not None and (len(parts) == 2 or parts[-2] in ("Tensor", "TensorBase", "functional")):
        return Binding(symbol, kind[0], f"ATen operator {kind[1]} ({path})")
    return Binding(symbol, "allowed")


def inspect_object(path: str | Path, data: bytes | None = None) -> ObjectReport:
    """Read one shared object's dynamic bindings and classify each."""
    report = ObjectReport(str(path))
    try:
        undefined, needed = read_dynamic(Path(path).read_bytes() if data is None else data)
    except (OSError, ElfError, struct.error) as exc:
        report.readable, report.error = False, str(exc)
        return report
    report.needed = needed
    for lib in needed:
        if _COMPUTE_LIBRARY.search(lib):
            report.bindings.append(Binding(lib, "compute", "links a compute library"))
    for symbol in undefined:
        binding = classify(symbol)
        report.bindings.append(binding)
    return report


def summarise(reports: Iterable[ObjectReport], limit: int = 6) -> tuple[list[str], list[str], list[str]]:
    """(compute bindings, run-time lookups, unreadable objects) as short human lines."""
    compute, lookups, unreadable = [], [], []
    for report in reports:
        name = Path(report.path).name
        if not report.readable:
            unreadable.append(f"{name}: {report.error}")
        for b in report.compute:
            if len(compute) < limit:
                compute.append(f"{name}: {b.symbol[:90]} ({b.reason})")
        for b in report.lookups:
            if len(lookups) < limit:
                lookups.append(f"{name}: {b.symbol}")
    return compute, lookups, unreadable


# ---- which objects are the candidate's -----------------------------------------------------------
def candidate_objects(before: dict[str, int], after: dict[str, int], writable: Iterable[str]) -> list[str]:
    """Executable objects mapped since ``before`` that candidate code could have written: beneath a
    folder it may write to (its working folder, its build folder, its caches, /dev), an in-memory
    file, or a file deleted since it was mapped. Torch's own libraries loaded lazily are not."""
    roots = tuple(str(Path(w)).rstrip("/") + "/" for w in writable)
    own = []
    for path, inode in after.items():
        if before.get(path) == inode:
            continue
        if path.startswith(("/memfd:", "/dev/", "/SYSV")) or path.endswith(" (deleted)") or path.startswith(roots):
            own.append(path)
    return sorted(own)
