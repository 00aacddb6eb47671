"""Evaluations per minute through the pool at several worker counts, measured in one run.

Each candidate is distinct (a different constant), so with ``--build`` every one is a cold C++/CUDA
build (compile + verify + profile); without it they are PyTorch-level candidates on the open track
(verify + profile only: the evaluator's own overhead).

    python bench/throughput.py --device cpu --workers 1 2 4 --candidates 8
    python bench/throughput.py --device cuda --build --workers 1 4 16 --candidates 48
    python bench/throughput.py --device cpu --build --workers 1 2 --candidates 4 --zygote both
    python bench/throughput.py --device cuda --workers 16 --candidates 64 --kernelbench ../shared/kernelbench \\
        --tasks 1/1 1/12 2/12 2/17 2/40 2/80 3/8 3/36

With ``--kernelbench`` the candidates are real work on KernelBench tasks at their published sizes: each is
the task's reference computation followed by a native kernel of its own (CUDA, or C++ on the CPU) that
rewrites the output, a different constant in each so every build is cold, spread over ``--tasks`` round
robin. Before the clock each task is evaluated with its identity candidate until its baselines are kept
(``KERNELCOURT_BASELINE_SAMPLES`` evaluations, or ``--keep-runs``, all in one batch), so the clock measures
what a training run pays once a task's baselines are known: reference outputs, build, verification and
the candidate's timing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASK = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


N = 1 << 20
PROFILES = {"cpu": {"N": 1 << 16}, "cuda": {"N": 1 << 24}}


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

OPEN_CANDIDATE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0) * (2.0 + 0.0 * {index})
'''


def build_candidate(device: str, index: int) -> str:
    from bench.compile_speed import CPU_KERNEL, CUDA_KERNEL

    template = CUDA_KERNEL if device == "cuda" else CPU_KERNEL
    # Same arithmetic (x>0 ? x : 0) * 2, written differently per candidate so every build is cold.
    scale = f"(2.0f + 0.0f * {index})"
    return template.replace("SCALEf", scale).replace("NAME", f"tp_{device}_{index}_{int(time.time())}")


# The native epilogue of a KernelBench candidate (--kernelbench): the output's float32 values copied
# through a kernel of the candidate's own, times a scale of exactly 1 written differently per candidate.
KB_CUDA = r'''
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void kc_scale_kernel(const float* a, float* b, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    b[i] = a[i] * SCALEf;
}
torch::Tensor kc_scale(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous cuda float32");
  auto y = torch::empty_like(x);
  const int64_t n = x.numel();
  const int threads = 256;
  const int blocks = (int)std::min<int64_t>((n + threads - 1) / threads, 8192);
  if (n) kc_scale_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
'''
KB_CPU = r'''
#include <torch/extension.h>
torch::Tensor kc_scale(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous float32 expected");
  auto y = torch::empty_like(x);
  const float* a = x.data_ptr<float>();
  float* b = y.data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) b[i] = a[i] * SCALEf;
  return y;
}
'''
KB_EPILOGUE = '''

from torch.utils.cpp_extension import load_inline as _load_inline

_KC_EXT = _load_inline(name="NAME", cpp_sources=CPP, cuda_sources=CUDA, functions=["kc_scale"], verbose=False)


class ModelNew(KcReference):
    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, torch.Tensor) and out.dtype == torch.float32:
            return _KC_EXT.kc_scale(out.contiguous())
        return out
'''


def kernelbench_candidate(task_source: str, device: str, index: int) -> str:
    """A real candidate for a KernelBench task: its reference computation (the task's ``Model``
    renamed ``KcReference``, ``super(Model, self)`` included) with a native epilogue of its own in a
    subclass ``ModelNew``, a different spelling of the scale 1 in each."""
    import re

    scale = f"(1.0f + 0.0f * {index})"
    native = (KB_CUDA if device == "cuda" else KB_CPU).replace("SCALEf", scale)
    if device == "cuda":
        cpp, cuda = "torch::Tensor kc_scale(torch::Tensor x);", native
    else:
        cpp, cuda = native, None
    epilogue = (KB_EPILOGUE.replace("NAME", f"kc_kb_{device}_{index}_{int(time.time())}")
                .replace("CPP, ", f"{cpp!r}, ").replace("CUDA, ", f"{cuda!r}, "))
    return re.sub(r"\bModel\b", "KcReference", task_source) + epilogue


def _cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine (/proc/stat: everything but idle and iowait), so the
    children the zygote forks count too; elsewhere, this process's and its reaped children's."""
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
        busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--processes", type=int, nargs="+", default=[1],
                        help="worker processes the local pool spreads its workers over (each count in turn)")
    parser.add_argument("--candidates", type=int, default=8, help="candidates per worker count (at least)")
    parser.add_argument("--rounds", type=int, default=0,
                        help="at least this many candidates per worker (a steady state after the first round)")
    parser.add_argument("--build", action="store_true", help="distinct native builds (compile-heavy)")
    parser.add_argument("--gpus", type=int, default=0, help="spread CUDA evaluations over this many GPUs")
    parser.add_argument("--timing-budget", type=float, default=0.2)
    parser.add_argument("--size", type=int, default=0, help="elements per input (default: the task's profile)")
    parser.add_argument("--pool", choices=["local", "ray"], default="local",
                        help="the local pool, or Ray (a local cluster: one actor per GPU, --workers spread over them)")
    parser.add_argument("--no-warm-up", dest="warm_up", action="store_false",
                        help="skip the worker's warm-up (probe, zygote, compile child, bridge, reference children; "
                             "Ray actors' too) before the clock: "
                             "the first round then pays for it, as a worker that never warmed up would")
    parser.add_argument("--kernelbench", default=None, metavar="ROOT",
                        help="real candidates on these KernelBench tasks at their published sizes (see above)")
    parser.add_argument("--tasks", nargs="*", default=None, help="with --kernelbench: level1/19_ReLU, 19_ReLU or 1/19")
    parser.add_argument("--baselines", default=None,
                        help="comma-separated baselines (default eager; eager,compile with --kernelbench)")
    parser.add_argument("--max-elements", type=int, default=None,
                        help="with --kernelbench: scale each task down (a CPU smoke)")
    parser.add_argument("--keep-runs", type=int, default=None,
                        help="with --kernelbench: identity evaluations of each task before the clock "
                             "(default: KERNELCOURT_BASELINE_SAMPLES)")
    args = parser.parse_args()
    if args.baselines is None:
        args.baselines = "eager,compile" if args.kernelbench else "eager"
    if args.warm_up and args.pool == "local":  # Ray actors warm themselves (_batch)
        from gpu_workers.workers.warmup import warm_up

        started = time.perf_counter()
        gpus = max(args.gpus, 1)  # reference children for as many evaluations as each GPU gets at once
        steps = warm_up(args.device, 0 if args.device == "cuda" else None, references=-(-max(args.workers) // gpus),
                        gpus=range(gpus) if args.device == "cuda" else None)
        print(f"worker warm-up before the clock, as a worker does once when it starts: "
              f"{time.perf_counter() - started:.1f} s ({', '.join(f'{k} {v:.1f} s' for k, v in steps.items())})",
              flush=True)

    if args.kernelbench:
        args.kb_tasks = _keep_baselines(args)
        if not args.kb_tasks:
            print("no task kept its baselines: nothing to time", flush=True)
            return 1
    task = TASK if not args.size else TASK.replace('PROFILES = {"cpu": {"N": 1 << 16}, "cuda": {"N": 1 << 24}}',
                                                    f'PROFILES = {{"cpu": {{"N": {args.size}}}, "cuda": {{"N": {args.size}}}}}')
    rates: dict[tuple[int, int], tuple[float, float | None]] = {}
    offset = 0
    for workers in args.workers:
        for processes in args.processes:
            if processes > workers:
                continue
            count = max(args.candidates, args.rounds * workers)
            label = (f"{workers} worker(s)" + (" through Ray" if args.pool == "ray" else "")
                     + (f" in {processes} processes" if processes > 1 else ""))
            rates[(workers, processes)] = _batch(args, task, workers, offset, count, label, processes)
            offset += count
    base_key = next(iter(rates))
    base, base_steady = rates[base_key]
    for (workers, processes), (rate, steady) in rates.items():
        after = (f" ({steady / base_steady:.2f}x after the first round: the first batch also pays for cold caches)"
                 if steady and base_steady else "")
        print(f"throughput at {workers} workers in {processes} process(es) vs {base_key[0]} in {base_key[1]}: "
              f"{rate / base:.2f}x{after}")
    return 0


def _batch(args: argparse.Namespace, task: str, workers: int, offset: int, count: int,
           label: str, processes: int = 1) -> tuple[float, float | None]:
    """One batch of ``count`` distinct candidates through a pool of ``workers`` (spread over
    ``processes`` worker processes, each warmed up before the clock); returns evaluations per minute,
    overall and after the first round (None when there is too little to say)."""
    from gpu_workers import EvalRequest
    from gpu_workers.hardware import placement
    from gpu_workers.workers.pool import LocalPool, RayPool

    requests = []
    baselines = tuple(b for b in args.baselines.split(",") if b)
    for i in range(count):
        index = offset + i
        if args.kernelbench:  # real work: the tasks round robin, each candidate a native build of its own
            key, source_of_task = args.kb_tasks[i % len(args.kb_tasks)]
            requests.append(EvalRequest(task_source=source_of_task, task_name=key, device=args.device, track="open",
                                        kernel_source=kernelbench_candidate(source_of_task, args.device, index),
                                        baselines=baselines, timing_budget_s=args.timing_budget,
                                        max_elements=args.max_elements))
            continue
        source = build_candidate(args.device, index) if args.build else OPEN_CANDIDATE.format(index=index)
        requests.append(EvalRequest(task_source=task, kernel_source=source, device=args.device,
                                    track="strict" if args.build else "open", baselines=baselines,
                                    timing_budget_s=args.timing_budget))
    if args.pool == "ray":
        mark = time.perf_counter()
        pool = RayPool(actors=max(args.gpus, 1), concurrency=max(1, workers // max(args.gpus, 1)))
        if args.warm_up:  # as the local pool's warm-up: before the clock, as a worker does once when it starts
            ready = pool.wait_ready()
            print(f"Ray actors started and warmed up before the clock: {time.perf_counter() - mark:.1f} s"
                  f"{'' if ready else ' (not all of them finished their warm-up)'}", flush=True)
    elif processes > 1:
        mark = time.perf_counter()
        pool = LocalPool(workers=workers, gpus=args.gpus, processes=processes,
                         warm=args.device if args.warm_up else None)
        ready = pool.wait_ready()
        print(f"{processes} worker processes started{' and warmed up' if args.warm_up else ''} before the clock: "
              f"{time.perf_counter() - mark:.1f} s{'' if ready else ' (not all of them finished their warm-up)'}",
              flush=True)
    else:
        pool = LocalPool(workers=workers, gpus=args.gpus)
    started = time.perf_counter()
    cpu_before = _cpu_seconds()
    results, finished = [], []
    with pool:
        for _, result in pool.as_completed(requests):
            results.append(result)
            finished.append(time.perf_counter() - started)
            slot = result.timing_stats.get("gpu_slot") or {}
            print(f"  [{time.perf_counter() - started:6.1f} s] {result.status} in {result.duration_s} s "
                  f"(compile {(result.compile_ms or 0) / 1e3:.1f} s, GPU held {slot.get('held_s', 0)} s of which "
                  f"alone {slot.get('exclusive_s', 0)} s, waited {slot.get('wait_s', 0)} s)", flush=True)
            if result.status != "passed" or result.findings:  # what went wrong, or what was flagged
                said = "; ".join(f"{f.severity}:{f.rule}: {f.message[:200]}" for f in result.findings)
                print(f"    {result.status}: {(result.message[:400] + '; ' if result.message else '') + said}",
                      flush=True)
    elapsed = time.perf_counter() - started
    cpu_per_eval = (_cpu_seconds() - cpu_before) / max(len(results), 1)
    statuses = Counter(r.status for r in results)
    rate = count / elapsed * 60
    # after the first round (starting children, caches, the zygote): completions per minute
    steady = ((len(finished) - workers) / (finished[-1] - finished[workers - 1]) * 60
              if len(finished) >= 2 * workers and finished[-1] > finished[workers - 1] else None)
    busy: dict[str, float] = {}  # seconds some evaluation held the GPU (shared holders overlap)
    alone: dict[str, float] = {}  # seconds of timing with the GPU to itself
    for r in results:
        gpu_info = r.hardware.get("gpu") or {}
        gpu = gpu_info.get("uuid") or gpu_info.get("index", 0)  # a Ray actor's GPU is index 0 in its own view
        slot = r.timing_stats.get("gpu_slot") or {}
        busy[gpu] = busy.get(gpu, 0.0) + float(slot.get("held_s", 0.0))
        alone[gpu] = alone.get(gpu, 0.0) + float(slot.get("exclusive_s", 0.0))
    kernel_stats = [r.timing_stats.get("kernel") or {} for r in results]
    iterations = sorted(int(k.get("iterations") or 0) for k in kernel_stats)
    spun = sum(1 for k in kernel_stats if k.get("host_waits") == "spin")
    places: dict[str, list[float]] = {}  # the timing's host CPUs against the GPU's NUMA node: the reward's medians
    for r, k in zip(results, kernel_stats):
        if k.get("median_ms"):
            places.setdefault(placement(r), []).append(float(k["median_ms"]))

    def middle(key: str) -> str:  # the median over candidates of one timing figure
        values = sorted(float(k[key]) for k in kernel_stats if k.get(key))
        return f"{values[len(values) // 2]:.4f}" if values else "nan"

    timed = Counter(k.get("timed", "?") for k in kernel_stats)
    uncovered = [int(k.get("first_sights_uncovered") or 0) for k in kernel_stats]
    spent = [r.timing_stats.get("cpu_s") or {} for r in results]
    who = sorted({k for s in spent for k in s}, key=lambda k: (k == "total", k))
    cpu_by_who = ", ".join(f"{k} {statistics.median(float(s.get(k, 0.0)) for s in spent):.2f}" for k in who)
    compile_s = sorted((r.compile_ms or 0) / 1e3 for r in results if r.compile_ms)
    median_compile = compile_s[len(compile_s) // 2] if compile_s else 0.0
    occupancy = ", ".join(f"GPU {str(g)[:12]}: held {held / elapsed:.0%} of the wall time (over 100%: work overlapped), "
                          f"timing alone {alone[g] / elapsed:.0%}" for g, held in sorted(busy.items())
                          if args.device == "cuda")
    steady_text = f" (after the first {workers}: {steady:.1f}/min)" if steady else ""
    print(f"  where an evaluation's time went (median seconds from its start; {_pauses(results)}): "
          f"{_timeline_medians(results)}; timed iterations per candidate: median "
          f"{iterations[len(iterations) // 2] if iterations else 0} ({spun} of {len(results)} spun while waiting on "
          f"the GPU; the host outlasted the first sights' spin {sum(uncovered)} times, in "
          f"{sum(1 for u in uncovered if u)} candidates); medians over candidates: the reward's "
          f"{middle('median_ms')} ms ({dict(timed)}), kernel side "
          f"{middle('gpu_median_ms')} ms, host {middle('host_median_ms')} ms per call, end to end "
          f"{middle('e2e_median_ms')} ms (an empty iteration {middle('round_trip_ms')} ms); timed on the GPU's NUMA node: "
          + (", ".join(f"{where} {len(v)} (the reward's {sorted(v)[len(v) // 2]:.4f} ms)" for where, v in sorted(places.items()))
             or "no timings"), flush=True)
    print(f"  {_stretches(results)}", flush=True)
    if steady:  # the first round against the rest: where a cold start costs
        print(f"  the first {workers} evaluations' timeline: {_timeline_medians(results[:workers])}; the others': "
              f"{_timeline_medians(results[workers:])}", flush=True)
    print(f"{label}: {count} candidates in {elapsed:.1f} s = {rate:.1f}/min{steady_text} {dict(statuses)}; "
          f"median compile {median_compile:.1f} s; {occupancy or 'no GPU slot'}; CPU {cpu_per_eval:.1f} busy core-s "
          f"per evaluation (the whole machine's); by who, median core-s: {cpu_by_who or 'not recorded'}", flush=True)
    return rate, steady


def _keep_baselines(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Before the clock: each KernelBench task's identity candidate as many times as its baselines
    need samples (all in one batch, the tasks interleaved), so they are kept; returns the (key,
    source) of the tasks whose every identity evaluation passed."""
    from gpu_workers import EvalRequest
    from gpu_workers.suite.kernelbench import identity_candidate, task_files
    from gpu_workers.tasks.facts import samples
    from gpu_workers.workers.pool import LocalPool

    found = task_files(Path(args.kernelbench), None, args.tasks)
    if not found:
        raise SystemExit(f"no KernelBench tasks under {args.kernelbench} match {args.tasks}")
    sources = {t.key: t.path.read_text(encoding="utf-8") for t in found}
    baselines = tuple(b for b in args.baselines.split(",") if b)
    copies = args.keep_runs if args.keep_runs is not None else samples()
    requests = [EvalRequest(task_source=src, kernel_source=identity_candidate(src), task_name=key,
                            device=args.device, track="open", baselines=baselines,
                            timing_budget_s=args.timing_budget, max_elements=args.max_elements)
                for _ in range(copies) for key, src in sources.items()]
    kept = dict(sources)
    started = time.perf_counter()
    done = 0
    with LocalPool(workers=max(args.workers), gpus=args.gpus) as pool:
        for index, result in pool.as_completed(requests):
            done += 1
            request = requests[index]
            if result.status != "passed" and request.task_name in kept:
                print(f"  {request.task_name}: identity {result.status}, left out: {result.message[:300]}", flush=True)
                kept.pop(request.task_name)
            if done % max(1, len(sources)) == 0 or done == len(requests):
                print(f"  baselines: {done} of {len(requests)} identity evaluations at "
                      f"{time.perf_counter() - started:.1f} s", flush=True)
    print(f"baselines kept before the clock for {len(kept)} tasks ({', '.join(kept)}) in "
          f"{time.perf_counter() - started:.1f} s ({copies} identity evaluations each)", flush=True)
    return list(kept.items())


def _timeline_medians(results: list) -> str:
    """For each timeline mark that every evaluation reached (its first occurrence), the median
    second at which it came, in that order."""
    firsts: list[dict[str, float]] = []
    for r in results:
        seen: dict[str, float] = {}
        for label, at in r.timing_stats.get("timeline") or []:
            seen.setdefault(str(label), float(at))
        firsts.append(seen)
    if not firsts:
        return "no timelines"
    common = set(firsts[0]).intersection(*firsts[1:])
    medians = sorted((statistics.median(f[label] for f in firsts), label) for label in common)
    return ", ".join(f"{label} {at:.2f}" for at, label in medians) or "no common marks"


def _stretches(results: list) -> str:
    """What holds a waiting timing back: each shared hold's stretches without a pause point, by the
    step that ended them (median, 90th percentile, longest seconds), longest first; and the timers'
    own waits."""
    by_step: dict[str, list[float]] = {}
    timer_waits = []
    for r in results:
        slot = r.timing_stats.get("gpu_slot") or {}
        timer_waits.append(float(slot.get("exclusive_wait_s", 0.0)))
        for step, values in (slot.get("stretches") or {}).items():
            by_step.setdefault(step, []).extend(float(v) for v in values)
    if not by_step:
        return "no shared-hold stretches recorded"

    def pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    rows = sorted(by_step.items(), key=lambda kv: -pct(kv[1], 0.9))
    text = "; ".join(f"{step} {pct(v, 0.5):.3f}/{pct(v, 0.9):.3f}/{max(v):.3f} (x{len(v)})" for step, v in rows)
    return (f"a timer's wait per evaluation: median {statistics.median(timer_waits):.3f} s; shared stretches "
            f"by the step that ended them, median/p90/longest s: {text}")


def _pauses(results: list) -> str:
    pauses = [int((r.timing_stats.get("gpu_slot") or {}).get("pauses", 0)) for r in results]
    return f"{sum(pauses)} pause(s) for a waiting timing in {len(results)} evaluations"


if __name__ == "__main__":
    sys.exit(main())
