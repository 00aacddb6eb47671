"""linkage: the dynamic symbol table of a real shared object, built here with the system compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_workers.build import linkage
from gpu_workers.child.isolation import mapped_objects

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


def build(tmp_path: Path, source: str, name: str = "obj", extra: tuple[str, ...] = ()) -> Path:
    src = tmp_path / f"{name}.cpp"
    src.write_text(source)
    out = tmp_path / f"lib{name}.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O0", str(src), "-o", str(out), *extra], check=True)
    return out


HONEST = """
#include <cstring>
#include <cstdlib>
namespace c10 { void warn(const char*); namespace detail { void torchCheckFail(const char*); } }
namespace at { namespace _ops { struct empty_memory_format { static void call(int); };
                                struct empty_like { static void call(int); };
                                struct fill__Scalar { static void call(int); }; }
               struct TensorBase { void __dispatch_contiguous(int) const; }; }
extern "C" void run(float* out, const float* in, int n) {
  at::_ops::empty_memory_format::call(n); at::_ops::empty_like::call(n); at::_ops::fill__Scalar::call(0);
  at::TensorBase().__dispatch_contiguous(0);
  for (int i = 0; i < n; ++i) out[i] = in[i] > 0 ? in[i] : 0;
  std::memcpy(out, in, 4); c10::warn("x"); if (!n) c10::detail::torchCheckFail("n");
  void* p = std::malloc(4); std::free(p);
}
"""


def test_an_object_that_binds_only_allocation_metadata_and_libc_has_no_compute(tmp_path):
    # given an object that allocates through ATen, warns through c10 and computes in its own loop
    report = linkage.inspect_object(build(tmp_path, HONEST))
    # then nothing it binds is compute or a lookup
    assert report.readable
    assert report.compute == [] and report.lookups == []
    assert "_ZN2at4_ops19empty_memory_format4callEi" in {b.symbol for b in report.bindings}


@pytest.mark.parametrize(("declaration", "call", "reason"), [
    # spelled as the dispatcher's entry point, as a backend kernel below it, as a native function
    ("namespace at { namespace _ops { struct mm { static void call(int); }; } }", "at::_ops::mm::call(1);",
     "ATen operator mm"),
    ("namespace at { namespace cpu { void addmm_out(int); } }", "at::cpu::addmm_out(1);", "ATen operator addmm"),
    ("namespace at { namespace native { void cpublas_gemm_impl(int); } }", "at::native::cpublas_gemm_impl(1);",
     "below the dispatcher"),
    ("namespace at { namespace compositeexplicitautograd { void tanh(int); } }",
     "at::compositeexplicitautograd::tanh(1);", "ATen operator tanh"),
    ("namespace torch { void bmm(int); }", "torch::bmm(1);", "ATen operator bmm"),
    # BLAS declared by hand (libtorch exports it), the C interface, oneDNN's C++ API
    ('extern "C" void sgemm_(const char*, const char*, int*);', "sgemm_(0, 0, 0);", "BLAS"),
    ('extern "C" void cblas_sdot(int);', "cblas_sdot(1);", "BLAS"),
    ("namespace dnnl { void matmul_exec(int); }", "dnnl::matmul_exec(1);", "compute library"),
    ('extern "C" void aoti_torch_cpu_mm_out(int);', "aoti_torch_cpu_mm_out(1);", "AOTInductor"),
])
def test_library_compute_is_found_whatever_the_spelling(tmp_path, declaration, call, reason):
    # given an object that reaches library compute from C++
    source = f"{declaration}\nextern \"C\" void run() {{ {call} }}\n"
    report = linkage.inspect_object(build(tmp_path, source))
    # then that binding is compute, with a reason naming what it reaches
    assert [b.reason for b in report.compute if reason in b.reason], report.bindings


@pytest.mark.parametrize("symbol", ["dlsym", "dlopen", "dl_iterate_phdr", "dlvsym"])
def test_a_run_time_symbol_lookup_is_a_lookup(tmp_path, symbol):
    # given an object that can look any symbol up at run time
    decls = {"dlsym": "void* dlsym(void*, const char*);", "dlopen": "void* dlopen(const char*, int);",
             "dl_iterate_phdr": "int dl_iterate_phdr(int (*)(void*, unsigned long, void*), void*);",
             "dlvsym": "void* dlvsym(void*, const char*, const char*);"}
    args = {"dlsym": "0, 0", "dlopen": "0, 0", "dl_iterate_phdr": "0, 0", "dlvsym": "0, 0, 0"}
    source = f'extern "C" {{ {decls[symbol]} }}\nextern "C" void run() {{ {symbol}({args[symbol]}); }}\n'
    report = linkage.inspect_object(build(tmp_path, source, extra=("-ldl",)))
    # then it is reported as a lookup
    assert [b.symbol for b in report.lookups] == [symbol]


def test_linking_a_compute_library_is_compute(tmp_path):
    # given an object linked against a library named like OpenBLAS
    build(tmp_path, 'extern "C" void sgemm_stub() {}', name="openblas")
    obj = build(tmp_path, 'extern "C" void sgemm_stub();\nextern "C" void run() { sgemm_stub(); }\n',
                name="cand", extra=(f"-L{tmp_path}", "-lopenblas"))
    report = linkage.inspect_object(obj)
    # then the DT_NEEDED entry is a compute binding
    assert report.needed[0] == "libopenblas.so"
    assert any(b.symbol == "libopenblas.so" for b in report.compute)


def test_a_file_that_is_not_an_object_is_unreadable(tmp_path):
    path = tmp_path / "fake.so"
    # an ELF64 little-endian header whose section header table is missing (stripped by hand)
    path.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    report = linkage.inspect_object(path)
    assert not report.readable and "section headers" in report.error


def test_candidate_objects_are_the_new_ones_it_could_write():
    # given the executable mappings before and after the candidate's import
    before = {"/usr/lib/libc.so.6": 11, "/venv/torch/lib/libtorch_cpu.so": 12}
    after = {**before, "/venv/torch/lib/libtorch_cuda_linalg.so": 13, "/build/ext/ext.so": 14,
             "/dev/shm/x.so": 15, "/memfd:jit (deleted)": 16, "/tmp/ka-candidate-1/y.so (deleted)": 17}
    # then only those beneath a writable folder, in memory or deleted are the candidate's
    assert linkage.candidate_objects(before, after, ["/build", "/tmp/ka-candidate-1"]) == [
        "/build/ext/ext.so", "/dev/shm/x.so", "/memfd:jit (deleted)", "/tmp/ka-candidate-1/y.so (deleted)"]


def test_mapped_objects_reads_executable_file_mappings():
    maps = ("7f00-7f10 r-xp 00000000 08:01 42 /usr/lib/libc.so.6\n"
            "7f10-7f20 rw-p 00000000 08:01 42 /usr/lib/libc.so.6\n"
            "7f20-7f30 r--p 00000000 08:01 43 /data/weights.bin\n"
            "7ffd-7ffe r-xp 00000000 00:00 0 [vdso]\n")
    assert mapped_objects(maps) == {"/usr/lib/libc.so.6": 42}
