"""The split CUDA build: device code apart from torch's headers, host launches through launchers."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from gpu_workers.build.split import NotSplittable, mask, split_cuda_source

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TYPICAL = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#define BLOCK 256  // threads per block
struct Params { float scale; int64_t n; };
constexpr int kUnroll = 4;
static __device__ __forceinline__ float relu(float v) { return v > 0.f ? v : 0.f; }
__global__ void __launch_bounds__(BLOCK) scaled_relu_kernel(const float* __restrict__ a, float* b, Params p) {
  /* a comment with __global__ and k<<<1, 1>>>() in it */
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < p.n; i += (int64_t)gridDim.x * blockDim.x)
    b[i] = relu(a[i]) * p.scale;
}
__global__ void fill_kernel(float* out, float value, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}
torch::Tensor scaled_relu(torch::Tensor x, double scale) {
  auto y = torch::empty_like(x);
  Params p{(float)scale, x.numel()};
  const int blocks = (int)std::min<int64_t>((p.n + BLOCK - 1) / BLOCK, 65535);
  const char* note = "launch<<<here>>>";
  (void)note;
  scaled_relu_kernel<<<blocks, BLOCK, 0, at::cuda::getCurrentCUDAStream()>>>(
      x.data_ptr<float>(), y.data_ptr<float>(), p);
  fill_kernel<<<dim3(1), dim3(32)>>>(y.data_ptr<float>(), 0.f, std::min<int64_t>(p.n, 0));
  return y;
}
"""


def test_typical_source_splits_into_torch_free_device_code_and_launching_host_code():
    split = split_cuda_source(TYPICAL)

    assert [k.name for k in split.kernels] == ["scaled_relu_kernel", "fill_kernel"]
    assert split.kernels[0].names == ["a", "b", "p"]
    # device side: the candidate's device code verbatim, CUDA headers only, one launcher per kernel
    assert "torch" not in split.device.replace("kernelcourt", "")
    assert "static __device__ __forceinline__ float relu" in split.device
    assert "struct Params { float scale; int64_t n; };" in split.device
    assert "constexpr int kUnroll = 4;" in split.device
    assert "#define BLOCK 256" in split.device
    assert ("scaled_relu_kernel<<<config.grid, config.block, config.shared, config.stream>>>(a, b, p);"
            in split.device)
    assert "torch::Tensor scaled_relu" not in split.device
    # host side: torch code, launches rewritten, no device code, the string literal untouched
    assert "#include <ATen/cuda/CUDAContext.h>" in split.host
    assert "__device__" not in split.host and "<<<blocks" not in split.host
    assert ("kernelcourt_launch_scaled_relu_kernel(kernelcourt_config(blocks, BLOCK, 0, "
            "at::cuda::getCurrentCUDAStream()), \n      x.data_ptr<float>(), y.data_ptr<float>(), p)") in split.host
    assert "kernelcourt_launch_fill_kernel(kernelcourt_config(dim3(1), dim3(32)), y.data_ptr<float>()" in split.host
    assert '"launch<<<here>>>"' in split.host
    assert "void kernelcourt_launch_fill_kernel(kernelcourt_launch_config config, float* out" in split.host


@pytest.mark.parametrize("source, reason", [
    ("template <typename T> __global__ void k(T* x) {}\nvoid f() { k<float><<<1, 1>>>(nullptr); }",
     "templated kernel"),
    ("__global__ void k(float* x) { TORCH_CHECK(false); }", "device code that uses torch"),
    ("#ifdef FAST\n__global__ void k(float* x) {}\n#endif", "conditional compilation"),
    ("namespace ops { __global__ void k(float* x) {} }", "namespace"),
    ("__global__ void k(float*) {}", "unnamed kernel parameter"),
    ("__global__ void k(float* x) {}\nvoid f() { cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 1); }",
     "other than by launching"),
    ("__global__ void k(float* x) {}\nvoid f() { auto p = &g<<<1, 1>>>(nullptr); }", "other than a plain kernel"),
    ("__device__ float twice(float v) { return 2 * v; }", "no kernel"),
])
def test_what_the_splitter_leaves_to_the_plain_build(source, reason):
    with pytest.raises(NotSplittable, match=reason):
        split_cuda_source(source)


def test_mask_blanks_comments_and_literals_but_keeps_positions():
    source = 'int a; // __global__\nconst char* s = "x<<<y"; /* {\n */ char c = \'{\';'
    masked = mask(source)
    assert len(masked) == len(source) and masked.count("\n") == source.count("\n")
    assert "__global__" not in masked and "<<<" not in masked and "{" not in masked
    assert masked.startswith("int a;")


def test_mutable_globals_stay_with_the_host_and_constants_go_to_both():
    split = split_cuda_source("int calls = 0;\nconst int kN = 8;\n__global__ void k(float* x) { x[0] = kN; }\n"
                              "void f(float* x) { ++calls; k<<<1, 1>>>(x); }")
    assert "int calls = 0;" in split.host and "int calls = 0;" not in split.device
    assert "const int kN = 8;" in split.host and "const int kN = 8;" in split.device


def _cuda_sources(kernel_file_source: str) -> list[str]:
    """The string constants of a candidate file that hold CUDA kernels."""
    found = []
    for node in ast.walk(ast.parse(kernel_file_source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            found.append(node.value)
    return found


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (no GPU needed)")
def test_device_halves_of_the_suite_kernels_compile_alone_with_nvcc(tmp_path):
    """Every suite kernel the splitter accepts yields a .cu that nvcc compiles without torch."""
    from gpu_workers.suite import list_tasks

    splits = {}
    for task in list_tasks():
        for index, source in enumerate(_cuda_sources(task.cuda_kernel_source)):
            try:
                splits[f"{task.name}_{index}"] = split_cuda_source(source)
            except NotSplittable:
                continue
    assert len(splits) >= 10  # most of the suite: the templated GEMMs are left to the plain build

    def compile_one(item):
        name, split = item
        path = tmp_path / f"{name}.cu"
        path.write_text(split.device)
        return name, subprocess.run(
            ["nvcc", "-c", str(path), "-o", str(tmp_path / f"{name}.o"), "-std=c++17", "--expt-relaxed-constexpr",
             "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-gencode=arch=compute_90,code=sm_90",
             "--compiler-options", "-fPIC"], capture_output=True, text=True, timeout=300)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(compile_one, splits.items()))
    failures = {name: r.stderr[-1500:] for name, r in results if r.returncode != 0}
    assert failures == {}


SPLIT_FAILS_TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 3.0


N = 1 << 20


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

# The host code copies into a __constant__ symbol: in the split it cannot see that symbol, the split
# build fails, and the plain build must take over without the candidate noticing.
CONSTANT_SYMBOL_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__constant__ float factor[1];
__global__ void scale_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * factor[0];
}
torch::Tensor scale(torch::Tensor x) {
  float three = 3.0f;
  cudaMemcpyToSymbol(factor, &three, sizeof(float));
  auto y = torch::empty_like(x);
  int64_t n = x.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""
ext = load_inline(name="ka_split_fallback", cpp_sources="torch::Tensor scale(torch::Tensor x);", cuda_sources=CUDA,
                  functions=["scale"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scale(x.contiguous())
'''


@pytest.mark.gpu
@needs_cuda
def test_split_build_failure_falls_back_to_the_plain_build():
    from gpu_workers import EvalRequest, evaluate
    from gpu_workers.build.toolchain import extension_dir
    from gpu_workers.hardware import cuda_arch_list, hardware_info

    request = EvalRequest(task_source=SPLIT_FAILS_TASK, kernel_source=CONSTANT_SYMBOL_KERNEL, device="cuda",
                          baselines=("eager",), timing_budget_s=0.2)
    result = evaluate(request)
    assert result.status == "passed", (result.message, result.compile_log[-2000:], result.run_log[-2000:])
    ext = extension_dir(CONSTANT_SYMBOL_KERNEL, "cuda", cuda_arch_list(hardware_info("cuda")))
    # the split that failed left its marker, so the next build of this source skips it: the light
    # build's split (the default where the light build applies) or the plain split's
    markers = (ext / "kernelcourt-lite-split" / "ka_split_fallback" / "lite-failed.log",
               ext / "kernelcourt-split" / "ka_split_fallback" / "split-failed.log")
    assert any(marker.exists() for marker in markers), result.compile_log[-2000:]


COMPARE_WITH_PLAIN = r'''
import os, sys, time, torch
from torch.utils.cpp_extension import load_inline
sys.path.insert(0, sys.argv[1])
from gpu_workers.build import inline as fastbuild
source, folder, name = open(sys.argv[2]).read(), sys.argv[3], sys.argv[4]
cpp = "torch::Tensor scaled_relu(torch::Tensor x, double scale);"
x = torch.randn(1 << 20, device="cuda")
plain = load_inline(name="ka_plain", cpp_sources=cpp, cuda_sources=source, functions=["scaled_relu"])
assert fastbuild.install()
started = time.perf_counter()
fast = torch.utils.cpp_extension.load_inline(name=name, cpp_sources=cpp, cuda_sources=source, functions=["scaled_relu"])
print(f"{folder}: built and loaded in {time.perf_counter() - started:.2f} s")
built = os.path.join(os.environ["TORCH_EXTENSIONS_DIR"], folder, name)
assert os.path.isdir(built), os.listdir(os.environ["TORCH_EXTENSIONS_DIR"])
failed = [f for f in os.listdir(built) if f.endswith("-failed.log")]
assert not failed, open(os.path.join(built, failed[0])).read()
stream = torch.cuda.Stream()
with torch.cuda.stream(stream):  # launches go to PyTorch's current stream
    a, b = plain.scaled_relu(x, 1.5), fast.scaled_relu(x, 1.5)
stream.synchronize()
assert torch.equal(a, b)
print("identical")
'''


def compare_with_plain_build(work: Path, folder: str, name: str, env_extra: dict[str, str]) -> str:
    """Build TYPICAL plainly and through our wrapper in a fresh process; the wrapper's build must
    come from ``folder`` (no failure marker) and give the same output. ``work`` may be shared: the
    plain build is then made once."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "compare.py").write_text(COMPARE_WITH_PLAIN)
    (work / "kernel.cu").write_text(TYPICAL)
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(work / "ext"), **env_extra}
    done = subprocess.run([sys.executable, str(work / "compare.py"), str(root), str(work / "kernel.cu"), folder, name],
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0 and "identical" in done.stdout, done.stderr[-3000:]
    return done.stdout


@pytest.mark.gpu
@needs_cuda
def test_split_build_is_used_for_a_typical_kernel_and_matches_the_plain_build(tmp_path_factory):
    print(compare_with_plain_build(tmp_path_factory.getbasetemp() / "compare", "kernelcourt-split", "ka_split",
                                   {"KERNELCOURT_LITE": "0"}))  # the split alone
