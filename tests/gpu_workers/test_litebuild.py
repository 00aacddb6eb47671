"""Light builds: host code against light headers, every call through the bridge into PyTorch."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from gpu_workers.build import light as litebuild

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture()
def lite_load_inline(tmp_path, monkeypatch):
    """torch's load_inline with our fast paths installed, as in a compile or candidate child."""
    from torch.utils import cpp_extension

    from gpu_workers.build import inline as fastbuild

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    original = cpp_extension.load_inline
    assert fastbuild.install()
    try:
        yield cpp_extension.load_inline
    finally:
        cpp_extension.load_inline = original


def _unique(stem: str) -> str:
    return f"{stem}_{os.getpid()}_{time.monotonic_ns()}"


def _lite_dir(name: str) -> Path:
    return Path(os.environ["TORCH_EXTENSIONS_DIR"]) / "kernelcourt-lite" / name


API_TOUR = r"""
#include <torch/extension.h>
#include <vector>

torch::Tensor scaled_relu(torch::Tensor x, double scale) {
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "float32 expected, got ", x.scalar_type());
  auto y = torch::empty_like(x);
  const float* a = x.data_ptr<float>();
  float* b = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) b[i] = (a[i] > 0.f ? a[i] : 0.f) * static_cast<float>(scale);
  return y;
}

std::vector<torch::Tensor> tour(const torch::Tensor& x, torch::Tensor w) {
  auto options = torch::TensorOptions().dtype(torch::kFloat64).device(x.device());
  auto z = torch::zeros({x.size(0), x.size(-1)}, options);
  auto f = torch::full({2, 3}, 1.5, x.options());
  auto r = torch::arange(6, x.options()).view({2, 3});
  auto m = torch::matmul(x, w.t().contiguous());
  auto s = (x * 2.0 + 1.0 - x / 4.0).sum(std::vector<int64_t>{1}, true);
  auto c = torch::cat({f, r}, 0).reshape({-1});
  auto d = AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "tour", [&] {
    return static_cast<double>(sizeof(scalar_t));
  });
  auto strided = x.transpose(0, 1);
  TORCH_CHECK(!strided.is_contiguous() && strided.stride(0) == 1 && x.sizes().vec() == std::vector<int64_t>({4, 3}));
  auto t = torch::softmax(x, 1).to(torch::kFloat64) + z;
  t += 1;
  return {m, s, c, t, torch::full({1}, d, x.options()), torch::stack({x[0], x[1]}, 0)};
}

std::tuple<torch::Tensor, int64_t, double> named(const torch::Tensor& a, double s, bool flip, std::vector<int64_t> dims) {
  auto out = flip ? a.neg() : a.clone();
  out.mul_(s);
  return {out, static_cast<int64_t>(dims.size()), a.sum().item<double>()};
}

int64_t size_of(torch::Tensor x, int64_t d) { return x.size(d); }
torch::Tensor want_double(torch::Tensor x) { return torch::empty({1}, x.options().dtype(x.data_ptr<double>() ? torch::kFloat64 : torch::kFloat32)); }
torch::Tensor bad_matmul(torch::Tensor a, torch::Tensor b) { return torch::mm(a, b); }
void check_value(int64_t v) { TORCH_CHECK_VALUE(v >= 0, "v must be >= 0, got ", v); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scaled_relu", &scaled_relu, "scaled relu");
  m.def("tour", &tour);
  m.def("named", &named, py::arg("a"), py::arg("s") = 2.0, py::arg("flip") = false, py::arg("dims"));
  m.def("size_of", &size_of);
  m.def("want_double", &want_double);
  m.def("bad_matmul", &bad_matmul);
  m.def("check_value", &check_value);
  m.def("transpose", [](torch::Tensor x) { return x.t().contiguous(); });
}
"""
API_TOUR = API_TOUR.replace("x[0], x[1]", "x.select(0, 0), x.select(0, 1)")


def test_a_cpp_extension_builds_light_and_computes_what_pytorch_computes(lite_load_inline):
    name = _unique("lite_tour")
    started = time.perf_counter()
    ext = lite_load_inline(name=name, cpp_sources=API_TOUR)
    built_s = time.perf_counter() - started
    assert (_lite_dir(name) / f"{name}.so").exists() and not (_lite_dir(name) / "lite-failed.log").exists()
    print(f"light build: {built_s:.2f} s")

    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    w = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    assert torch.equal(ext.scaled_relu(x.flatten(), 1.5), torch.relu(x.flatten()) * 1.5)
    m, s, c, t, d, st = ext.tour(x, w)
    assert torch.equal(m, torch.matmul(x, w.t().contiguous()))
    assert torch.equal(s, (x * 2.0 + 1.0 - x / 4.0).sum(1, keepdim=True))
    assert torch.equal(c, torch.cat([torch.full((2, 3), 1.5), torch.arange(6.0).view(2, 3)]).reshape(-1))
    assert torch.equal(t, torch.softmax(x, 1).double() + torch.zeros(4, 3, dtype=torch.float64) + 1)
    assert d.item() == 4.0 and torch.equal(st, x[:2])

    out, count, total = ext.named(x, dims=[1, 2, 3])
    assert torch.equal(out, x * 2.0) and count == 3 and total == pytest.approx(x.sum().item())
    out, count, _ = ext.named(x, 3.0, True, [])
    assert torch.equal(out, -x * 3.0) and count == 0
    assert ext.transpose(x).shape == (3, 4) and ext.transpose(x).is_contiguous()
    assert ext.scaled_relu.__doc__.strip().endswith("scaled relu")


def test_the_light_header_precompiled_once_serves_a_build_and_changes_nothing_in_it(lite_load_inline, monkeypatch,
                                                                                   kernelcourt_cache_dir):
    from gpu_workers.build import pch as buildcache

    folder = buildcache.pch_dir(kernelcourt_cache_dir, "cpu", kind="lite")  # as a worker's warm-up builds it
    if folder is None:
        pytest.skip("needs GCC")
    monkeypatch.setenv("KERNELCOURT_LITE_PCH", str(folder))
    name = _unique("lite_pch")
    ext = lite_load_inline(name=name, cpp_sources=API_TOUR)
    x = torch.randn(64)
    assert torch.equal(ext.scaled_relu(x, 2.0), torch.relu(x) * 2.0)
    commands = subprocess.run(["ninja", "-C", str(_lite_dir(name)), "-t", "commands"], check=True,
                              capture_output=True, text=True).stdout.splitlines()
    unit = next(c.strip() for c in commands if " -c " in c)
    assert unit.endswith(" -o main.o")
    unit = unit[: -len("main.o")]
    shown = subprocess.run(unit + "with.o -H", shell=True, cwd=_lite_dir(name), capture_output=True, text=True)
    gch = str(folder / "torch" / "extension.h.gch")
    assert shown.returncode == 0 and f"! {gch}" in shown.stderr.splitlines()  # g++ took the precompiled header
    # ... and made the very object it makes from the header itself
    without = unit.replace(f"-I{folder} ", "").replace(f"-I{folder}", "")
    assert without != unit
    subprocess.run(without + "without.o", shell=True, cwd=_lite_dir(name), check=True, capture_output=True)
    assert (_lite_dir(name) / "with.o").read_bytes() == (_lite_dir(name) / "without.o").read_bytes()


def test_the_bridge_every_light_call_goes_through_is_built_optimised(lite_load_inline):
    # torch's load_inline adds no -O of its own; at -O0 the bridge cost ~25 µs more per call that
    # allocates a tensor (bench/compile_speed.py prints the host cost of a forward call either way)
    bridge = litebuild.bridge_module(False)
    ninja = (Path(bridge.__file__).parent / "build.ninja").read_text()
    cflags = next(line for line in ninja.splitlines() if line.startswith("cflags ="))
    assert "-O3" in cflags.split(), cflags


def test_light_builds_report_errors_as_the_plain_binding_does(lite_load_inline):
    ext = lite_load_inline(name=_unique("lite_errors"), cpp_sources=API_TOUR)
    x = torch.randn(8)
    with pytest.raises(RuntimeError, match="float32 expected, got Double"):
        ext.scaled_relu(x.double(), 1.0)
    with pytest.raises(RuntimeError, match="x must be contiguous"):
        ext.scaled_relu(torch.randn(4, 4).t(), 1.0)
    with pytest.raises(IndexError, match="Dimension out of range"):
        ext.size_of(x, 3)
    assert ext.size_of(x, -1) == 8
    with pytest.raises(RuntimeError, match="expected scalar type Double but found Float"):
        ext.want_double(x)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):  # PyTorch's own message, from mm
        ext.bad_matmul(torch.randn(2, 3), torch.randn(4, 5))
    with pytest.raises(ValueError, match="v must be >= 0, got -2"):
        ext.check_value(-2)
    with pytest.raises(TypeError):
        ext.scaled_relu(1, 2.0)
    with pytest.raises(TypeError, match="dims"):
        ext.named(x)
    with pytest.raises(TypeError, match="unexpected keyword"):
        ext.named(x, dims=[], nope=1)


def test_two_light_extensions_in_one_process_keep_their_own_functions(lite_load_inline):
    template = "torch::Tensor f(torch::Tensor x) { return x * VALUE; }"
    one = lite_load_inline(name=_unique("lite_one"), cpp_sources=template.replace("VALUE", "1.0"), functions=["f"])
    two = lite_load_inline(name=_unique("lite_two"), cpp_sources=template.replace("VALUE", "2.0"), functions="f")
    x = torch.ones(3)
    assert torch.equal(one.f(x), x) and torch.equal(two.f(x), 2 * x)


def test_code_beyond_the_light_headers_falls_back_to_the_full_build(lite_load_inline):
    # torch::nn::functional is not in the light headers: the light build fails to compile in about a
    # second, leaves its marker, and the full build (precompiled header) makes the module
    name = _unique("lite_fallback")
    source = ("torch::Tensor g(torch::Tensor x) { return torch::nn::functional::relu(x) + x.new_ones({1}); }")
    ext = lite_load_inline(name=name, cpp_sources=source, functions=["g"])
    assert (_lite_dir(name) / "lite-failed.log").exists()
    assert "error" in (_lite_dir(name) / "lite-failed.log").read_text().lower()
    x = torch.randn(6)
    assert torch.equal(ext.g(x), torch.relu(x) + 1)


@pytest.mark.parametrize("source, reason", [
    ("#include <torch/extension.h>\n#include <ATen/native/Resize.h>\nvoid f() {}", "includes <ATen/native/Resize.h>"),
    ("TORCH_LIBRARY(ns, m) { }", "uses TORCH_LIBRARY"),
    ("torch::Tensor f(torch::Tensor x) { return torch::autograd::grad({x}, {x})[0]; }", "uses autograd"),
    ("py::object f() { return py::none(); }", "uses py::object"),
])
def test_what_never_tries_the_light_build(source, reason):
    assert litebuild.lite_source_problem(source) == reason


def test_light_plans_follow_load_inline_arguments(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    base = {"name": "ext_a", "cpp_sources": "torch::Tensor f(torch::Tensor x) { return x; }", "functions": ["f"],
            "cuda_sources": None, "extra_cflags": ["-O2"], "extra_include_paths": ["/opt/inc"], "is_python_module": True}
    [lite] = litebuild.plans(dict(base))
    assert lite.kind == "light"
    assert lite.arguments["extra_include_paths"] == [str(litebuild.INCLUDE), "/opt/inc"]
    assert lite.arguments["extra_cflags"] == ["-O2", "-fvisibility=hidden"]
    assert 'm.def("f", torch::wrap_pybind_function(f), "f");' in lite.arguments["cpp_sources"][0]
    assert litebuild.plans({**base, "is_python_module": False}) == []  # a TORCH_LIBRARY-style library
    assert litebuild.plans({**base, "functions": None}) == []  # no binding at all: nothing to call
    assert litebuild.plans({**base, "name": "bad name"}) == []
    lite.marker.write_text("failed once")  # a failed light build is not tried again for this name
    assert litebuild.plans(dict(base)) == []
    monkeypatch.setenv("KERNELCOURT_LITE", "0")
    assert litebuild.plans({**base, "name": "ext_b"}) == []


def test_cuda_sources_plan_the_split_light_build_first_then_the_whole_one(tmp_path, monkeypatch):
    from tests.gpu_workers.test_splitbuild import TYPICAL

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    args = {"name": "ext_c", "cpp_sources": "torch::Tensor scaled_relu(torch::Tensor x, double scale);",
            "cuda_sources": TYPICAL, "functions": ["scaled_relu"], "is_python_module": True}
    split, whole = litebuild.plans(args)
    assert (split.kind, whole.kind) == ("light+split", "light")
    device = split.arguments["cuda_sources"][0]
    assert "torch" not in device.replace("kernelcourt", "") and "__global__ void fill_kernel" in device
    assert "kernelcourt_launch_scaled_relu_kernel(" in split.arguments["cpp_sources"][0]
    assert "-DKA_LITE_CUDA" in split.arguments["extra_cflags"] and split.arguments["with_cuda"]
    assert whole.arguments["cuda_sources"][0].startswith("#include <torch/types.h>")  # the light one, by -I
    monkeypatch.setenv("KERNELCOURT_SPLIT", "0")
    assert [p.kind for p in litebuild.plans({**args, "name": "ext_d"})] == ["light"]


NVCC = shutil.which("nvcc")


@pytest.mark.slow
@pytest.mark.skipif(NVCC is None, reason="needs nvcc (no GPU needed)")
def test_the_light_headers_compile_every_suite_cuda_kernel(tmp_path, monkeypatch):
    """The host half of every splittable suite kernel compiles against the light headers, and every
    other one compiles whole with nvcc against them: the suite's kernels all take a light build."""
    from torch.utils import cpp_extension

    from gpu_workers.suite import list_tasks

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    cuda_include = str(Path(cpp_extension.CUDA_HOME or "/usr/local/cuda") / "include")
    seen = {}
    captured: dict = {}

    def capture(*args, **kwargs):
        captured.update(kwargs)
        raise _Captured

    monkeypatch.setattr(cpp_extension, "load_inline", capture)
    for task in list_tasks():
        captured.clear()
        with pytest.raises(_Captured):
            exec(compile(task.cuda_kernel_source, task.name, "exec"), {"__name__": "kernel"})
        plan = litebuild.plans({**captured, "is_python_module": True, "name": f"lite_{task.name}"})[0]
        if plan.kind == "light+split":
            source = tmp_path / f"{task.name}.cpp"
            source.write_text(plan.arguments["cpp_sources"][0])
            cmd = ["c++", "-fsyntax-only", "-std=c++17", "-DKA_LITE_CUDA", "-DTORCH_EXTENSION_NAME=x",
                   "-I", str(litebuild.INCLUDE), "-isystem", cuda_include, str(source)]
        else:
            source = tmp_path / f"{task.name}.cu"
            source.write_text(plan.arguments["cuda_sources"][0])
            cmd = [NVCC, "-c", str(source), "-o", str(tmp_path / f"{task.name}.o"), "-std=c++17", "-DKA_LITE_CUDA",
                   "--expt-relaxed-constexpr", "-I", str(litebuild.INCLUDE), "-DTORCH_EXTENSION_NAME=x"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, (task.name, plan.kind, done.stderr[-3000:])
        seen[task.name] = plan.kind
    assert "light+split" in seen.values() and "light" in seen.values(), seen


class _Captured(Exception):
    pass


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("folder, name, env", [
    ("kernelcourt-lite-split", "ka_lite_split", {}),  # tried first: device half with CUDA's headers only
    ("kernelcourt-lite", "ka_lite_whole", {"KERNELCOURT_SPLIT": "0"}),  # the whole .cu against light headers
])
def test_a_cuda_extension_builds_light_and_matches_the_plain_build(folder, name, env, tmp_path_factory):
    from tests.gpu_workers.test_splitbuild import compare_with_plain_build

    print(compare_with_plain_build(tmp_path_factory.getbasetemp() / "compare", folder, name, env))


CPU_CANDIDATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

ext = load_inline(name="NAME", cpp_sources="""
torch::Tensor scale(torch::Tensor x) { return x * FACTOR; }
""", functions=["scale"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scale(x)
'''


def test_the_compile_phase_uses_a_spare_child_and_the_light_build():
    from gpu_workers import EvalRequest
    from gpu_workers.build.compile import build_context, close_spares, compile_candidate
    from gpu_workers.hardware import hardware_info

    hardware = hardware_info("cpu")
    close_spares()  # start from none: the first compile starts its own child and the next one's spare
    logs = []
    for factor in ("2.0", "3.0"):
        source = CPU_CANDIDATE.replace("NAME", _unique("lite_spare")).replace("FACTOR", factor)
        request = EvalRequest(task_source="", kernel_source=source, device="cpu")
        outcome = compile_candidate(request, hardware, build_context(request, hardware))
        assert outcome.ms is not None and not outcome.deferred, outcome.log
        logs.append(outcome.log)
    assert "spare child" not in logs[0] and "spare child" in logs[1]
    assert all(": light build" in log for log in logs), logs
