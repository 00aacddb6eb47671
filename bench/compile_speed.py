"""Cold compile-and-load of one-kernel candidates: our compile phase vs plain ``load_inline``.

Both paths start a fresh Python process that imports torch, so the ratio compares like with like.
Each candidate is distinct (a different constant in its body), so neither path hits a build cache.
The one-time precompiled-header build per toolchain is reported apart. Both builds of each candidate
are then loaded and run on the same input: the outputs must be identical.

    python bench/compile_speed.py --device cpu [--candidates 3]
    python bench/compile_speed.py --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CPU_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
torch::Tensor scaled_relu(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous float32 expected");
  auto y = torch::empty_like(x);
  const float* a = x.data_ptr<float>();
  float* b = y.data_ptr<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) b[i] = (a[i] > 0.f ? a[i] : 0.f) * SCALEf;
  return y;
}
"""
ext = load_inline(name="NAME", cpp_sources=SOURCE, functions=["scaled_relu"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scaled_relu(x.contiguous())
'''

CUDA_KERNEL = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void scaled_relu_kernel(const float* a, float* b, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    b[i] = (a[i] > 0.f ? a[i] : 0.f) * SCALEf;
}
torch::Tensor scaled_relu(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous cuda float32");
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 65535);
  scaled_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""
CPP_SOURCE = "torch::Tensor scaled_relu(torch::Tensor x);"
ext = load_inline(name="NAME", cpp_sources=CPP_SOURCE, cuda_sources=CUDA_SOURCE, functions=["scaled_relu"],
                  verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scaled_relu(x.contiguous())
'''

RUN_ONCE = r"""
import json, sys, time, torch, types
source_path, device, out, path = sys.argv[1:5]
if path == "ours":  # load what our compile phase built, as a candidate child does (light, split or plain)
    sys.path.insert(0, sys.argv[5])
    from gpu_workers.build import inline as fastbuild
    assert fastbuild.install(), "our load_inline could not be installed"
module = types.ModuleType("candidate")
exec(compile(open(source_path).read(), "candidate", "exec"), module.__dict__)
g = torch.Generator().manual_seed(1234)
x = torch.randn(1 << 16, generator=g).to(device)
model = module.ModelNew()
y = model(x).cpu()
torch.save(y, out)
small = torch.randn(256, generator=g).to(device)  # the host's cost of one forward call, kernel negligible
for _ in range(200):
    model(small)
calls = []
for _ in range(7):
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(1000):
        model(small)
    if device == "cuda":
        torch.cuda.synchronize()
    calls.append((time.perf_counter() - t0) / 1000 * 1e6)
print(json.dumps({"call_us": sorted(calls)[len(calls) // 2]}))
"""


def _call_us(done: subprocess.CompletedProcess) -> float:
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return float(json.loads(lines[-1])["call_us"]) if lines else float("nan")


def candidate(device: str, index: int, tag: str) -> str:
    template = CUDA_KERNEL if device == "cuda" else CPU_KERNEL
    scale = f"{1.0 + index / 1000:.3f}"
    return template.replace("SCALE", scale).replace("NAME", f"bench_{tag}_{device}_{index}_{os.getpid()}")


def plain_build(source_path: Path, device: str, ext_dir: Path, out: Path) -> tuple[float, float]:
    """Seconds to build and load with torch's own load_inline in a fresh process, and its forward's
    host cost per call (µs)."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(ext_dir)}
    env.pop("CPATH", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN_ONCE, str(source_path), device, str(out), "plain"], env=env,
                          check=True, capture_output=True, text=True)
    return time.perf_counter() - started, _call_us(done)


def ours_build(source: str, device: str, hardware: dict, show_log: bool = False) -> tuple[float, object]:
    from gpu_workers.build.compile import build_context, compile_candidate
    from gpu_workers.schema import EvalRequest

    request = EvalRequest(task_source="", kernel_source=source, device=device)
    started = time.perf_counter()
    build = build_context(request, hardware)
    outcome = compile_candidate(request, hardware, build)
    elapsed = time.perf_counter() - started
    if outcome.deferred:
        raise RuntimeError(f"our build did not complete: {outcome.log[-2000:]}")
    if show_log:  # where our time went, as the compile child reports it
        for line in outcome.log.splitlines():
            if line.startswith(("[kernelcourt]", "[judge]")):
                print(f"  {line}")
    return elapsed, build


def run_built(source_path: Path, device: str, build, out: Path) -> tuple[float, float]:
    """Load our build of the source in a fresh process, as the candidate child does (our load_inline
    finds the build made by the compile phase; nothing is compiled again), run it, and time its
    forward's host cost per call (µs). Returns (seconds, µs per call)."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(build.ext_dir)}
    if build.pch is not None:
        env["CPATH"] = str(build.pch)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN_ONCE, str(source_path), device, str(out), "ours", str(ROOT)],
                          env=env, check=True, capture_output=True, text=True)
    return time.perf_counter() - started, _call_us(done)


def build_path(folder: Path) -> str:
    """Which of our builds made the extension: light, split or plain (a failed path leaves a marker)."""
    for path, marker in (("light+split", "kernelcourt-lite-split"), ("light", "kernelcourt-lite"),
                         ("split", "kernelcourt-split")):
        for built in (folder / marker).glob("*"):
            if not any(built.glob("*-failed.log")) and any(built.glob("*.so")):
                return path
    return "plain"


def ninja_steps(folder: Path) -> dict[str, float]:
    """Seconds per build step (object files, the link) from the ``.ninja_log`` files under folder."""
    steps: dict[str, float] = {}
    for log in folder.rglob(".ninja_log"):
        for line in log.read_text().splitlines()[1:]:
            parts = line.split("\t")
            if len(parts) >= 4:
                steps[Path(parts[3]).name] = (int(parts[1]) - int(parts[0])) / 1e3
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--extra-ours", type=int, default=0,
                        help="more distinct candidates through our path only (compared with the same run's median)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    import torch

    from gpu_workers.build.compile import build_context
    from gpu_workers.build.toolchain import cache_root
    from gpu_workers.hardware import hardware_info
    from gpu_workers.schema import EvalRequest

    hardware = hardware_info(args.device)
    work = Path(tempfile.mkdtemp(prefix="ka-bench-"))
    # Every candidate is a distinct source, so every build is cold either way; the one-time pieces
    # (precompiled header, light-build bridge) are kept in KERNELCOURT_CACHE_DIR when it is set.
    os.environ.setdefault("KERNELCOURT_CACHE_DIR", str(work / "cache"))
    print(f"machine: {hardware['name']} ({os.cpu_count()} cores), torch {torch.__version__}, device {args.device}")

    started = time.perf_counter()
    probe = EvalRequest(task_source="", kernel_source=candidate(args.device, 0, "probe"), device=args.device)
    build = build_context(probe, hardware)
    print(f"one-time precompiled header for this toolchain: {time.perf_counter() - started:.1f} s "
          f"({'in use' if build.pch else 'not available: plain builds'}) under {cache_root()}")
    started = time.perf_counter()
    ours_build(candidate(args.device, 0, "probe"), args.device, hardware)  # builds the light-build bridge once
    print(f"one-time light-build bridge and a first build: {time.perf_counter() - started:.1f} s")

    plain_times, our_times, identical = [], [], True
    calls: list[tuple[float, float]] = []  # µs per forward call: (load_inline's build, ours)
    for index in range(1, args.candidates + 1):
        src_plain = work / f"plain_{index}.py"
        src_ours = work / f"ours_{index}.py"
        # Same kernel code, different extension names (so neither reuses the other's build).
        src_plain.write_text(candidate(args.device, index, "plain"))
        src_ours.write_text(candidate(args.device, index, "ours"))
        t_plain, call_plain = plain_build(src_plain, args.device, work / f"plain_ext_{index}",
                                          work / f"plain_{index}.pt")
        t_ours, built = ours_build(src_ours.read_text(), args.device, hardware, show_log=True)
        t_load, call_ours = run_built(src_ours, args.device, built, work / f"ours_{index}.pt")
        same = torch.equal(torch.load(work / f"plain_{index}.pt"), torch.load(work / f"ours_{index}.pt"))
        identical &= same
        plain_times.append(t_plain)
        our_times.append(t_ours)
        calls.append((call_plain, call_ours))
        print(f"candidate {index}: load_inline {t_plain:.1f} s, ours {t_ours:.1f} s (then loaded in a fresh process "
              f"in {t_load:.1f} s), outputs identical: {same}; host cost of a forward call: load_inline "
              f"{call_plain:.1f} µs, ours {call_ours:.1f} µs")
        for label, folder in (("load_inline", work / f"plain_ext_{index}"), ("ours", built.ext_dir)):
            steps = ninja_steps(folder)
            print(f"  {label} steps: " + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(steps.items())))
        print(f"  ours took the {build_path(built.ext_dir)} path")

    for index in range(args.candidates + 1, args.candidates + 1 + args.extra_ours):
        t_ours, built = ours_build(candidate(args.device, index, "ours"), args.device, hardware, show_log=True)
        our_times.append(t_ours)
        print(f"candidate {index} (ours only): {t_ours:.2f} s, the {build_path(built.ext_dir)} path")
    plain_med, ours_med = statistics.median(plain_times), statistics.median(our_times)
    print(f"median cold compile-and-load: load_inline {plain_med:.1f} s ({len(plain_times)} candidates), "
          f"ours {ours_med:.2f} s ({len(our_times)} candidates, worst {max(our_times):.2f} s)")
    print(f"outputs identical on every candidate: {identical}")
    if calls:
        plain_call, our_call = (statistics.median(c[i] for c in calls) for i in (0, 1))
        print(f"host cost of one forward call (median): load_inline's build {plain_call:.1f} µs, ours "
              f"{our_call:.1f} µs ({our_call / plain_call:.2f}x): what the end-to-end timing adds per call")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "hardware": hardware, "load_inline_s": plain_times,
                                               "ours_s": our_times, "identical": identical,
                                               "call_us": calls}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    print(f"compile speedup vs load_inline: {plain_med / ours_med:.1f}x")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
