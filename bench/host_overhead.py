"""Where a host-bound forward's time goes in the evaluator's children: the same task's ``Model``
timed host-side (``perf_counter`` around each call, the device synchronised before it) in fresh
processes that each set up one more piece of a child's state than the one before, against a
process with nothing set up (``plain``, as ``bench/plain_timing.py`` runs).

    python bench/host_overhead.py level3/28_VisionTransformer.py --device cuda --repeat 3

Stages, each including the ones before it:
  plain     the task's model and inputs at the children's thread count (``--threads``), nothing else
  heap      started with the environment a child of the device starts with that the process reads at
            exec (on the CPU glibc's tunables: ``build.compile.CPU_HEAP_TUNABLES``; on CUDA none)
  fork      the process forked, as a child is, from a parent that imported torch and our modules
            for every role and froze its objects for the collector (``sandbox/zygote.py``)
  prepare   ``runtime.prepare_torch`` (TF32 off, the CPU heap's policy), as both children
  imports   ``torch._dynamo`` and ``torch._inductor.compile_fx`` imported, as the reference child
            does for its compile baseline
  flops     one forward under ``FlopCounterMode``, as the reference counts the roofline's FLOPs
  guard     the candidate's audit guard installed and sealed, and the model built from source
            through ``exec_source`` as the candidate's is

With ``--timer ours`` each stage times the forward with the evaluator's own ``timing.time_callable``
(its host warm-up included) instead of the plain loop, so the process's state and the timing method
can be told apart. Each child also reports the medians of consecutive blocks of its calls
(``--blocks``) and the CPU it ended on; ``--pin`` runs every child on one CPU: a drift of the host's
speed inside one process shows in the blocks, one between processes in the repeats.

Every stage runs once per repeat, in a new process each time, the order rotated between repeats
so that a drift of the machine's speed falls on every stage alike. The ratio printed for each is
its median against ``plain``'s in the same repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpu_workers.build.compile import CPU_HEAP_TUNABLES  # noqa: E402

STAGES = ("plain", "heap", "fork", "prepare", "imports", "flops", "guard")

CHILD = r'''
import json, statistics, sys, time
sys.path.insert(0, {root!r})
import torch
from gpu_workers.child.size import apply_constants
from gpu_workers.tasks import exec_source, load_task_module

stage, device_name, calls = {stage!r}, {device!r}, {calls!r}
import ctypes, os
sched_getcpu = ctypes.CDLL(None).sched_getcpu  # bound before any guard: the CPU the timing ended on
pin = {pin!r}
if pin is not None:
    os.sched_setaffinity(0, {{pin}})
reached = lambda name: {stages!r}.index(stage) >= {stages!r}.index(name)
if reached("fork"):
    import gc
    from gpu_workers.child import main as child_main
    for role in child_main.PRELOAD:
        child_main.preload(role)
    gc.collect()
    gc.freeze()
    sys.stdout.flush()
    child = os.fork()
    if child:
        os._exit(os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]))
source = open({task!r}).read()
task = load_task_module(source, None)
constants = {constants!r}
if constants:
    apply_constants(task, constants, source)
device = torch.device(device_name)
torch.set_num_threads({threads!r})  # every stage at the children's thread count: the stages differ in nothing else
if reached("prepare"):
    from gpu_workers.child.runtime import prepare_torch
    prepare_torch({{"threads": {threads!r}}})
if reached("imports"):
    import torch._dynamo, torch._inductor.compile_fx  # noqa: F401
torch.manual_seed(0)
with device:
    inputs = list(task.get_inputs())
if reached("guard"):
    from gpu_workers.child.guard import install
    from gpu_workers.suite.kernelbench import identity_candidate
    guard = install()
    module = exec_source(identity_candidate(source), "kernelcourt_candidate", "<kernel>")
    if constants:
        apply_constants(module, constants, source)
    model_cls = module.ModelNew
else:
    model_cls = task.Model
model = model_cls(*task.get_init_inputs()).to(device).eval()
if reached("flops"):
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False), torch.no_grad():
        model(*inputs)
if reached("guard"):
    guard.seal()
if {timer!r} == "ours":
    from gpu_workers.child import timing
    torch.manual_seed(1)
    with device:
        rotations = [list(task.get_inputs()) for _ in range(4)]
    buffers = [v.clone() if isinstance(v, torch.Tensor) else v for v in rotations[0]]
    from gpu_workers.settings import current
    with torch.no_grad():  # the host warm-up as the evaluator's settings have it
        stats = timing.time_callable(model, buffers, rotations, device, budget_s=30.0, max_iters=calls, keep=(),
                                     settle_within=0.0, target_spread=0.0, host_warm_s=current().host_warm_s)
    host = stats.get("host_median_ms", stats["median_ms"])
    # quartiles where the result has the host series' own (the CPU's, or a host-timed reward's)
    series = (stats.get("spread_ms") or {{}}) if stats.get("timed") in (None, "host") else {{}}
    print(json.dumps({{"median_ms": host, "q1_ms": series.get("q1"), "q3_ms": series.get("q3"),
                      "samples": stats.get("e2e_iterations", stats.get("iterations", 0)),
                      "reward_ms": stats["median_ms"], "timed": stats.get("timed"),
                      "gpu_median_ms": stats.get("gpu_median_ms")}}))
    raise SystemExit(0)
sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
times = []
with torch.no_grad():
    for _ in range(10):
        model(*inputs)
    for _ in range(calls):
        sync()
        began = time.perf_counter()
        model(*inputs)
        times.append((time.perf_counter() - began) * 1e3)
    sync()
q = statistics.quantiles(times, n=4)
step = max(1, len(times) // {blocks!r})  # consecutive blocks: a drift inside the process, against one between processes
blocks = [round(statistics.median(times[i:i + step]), 4) for i in range(0, len(times) - step + 1, step)]
cpu = sched_getcpu()
print(json.dumps({{"median_ms": statistics.median(times), "q1_ms": q[0], "q3_ms": q[2], "samples": len(times),
                  "blocks_ms": blocks, "cpu": cpu}}))
'''


def run_stage(stage: str, args: argparse.Namespace, constants: dict[str, int]) -> dict[str, float]:
    code = CHILD.format(root=str(ROOT), stage=stage, device=args.device, calls=args.calls, stages=STAGES,
                        task=str(args.task), constants=constants, threads=args.threads, timer=args.timer,
                        pin=args.pin, blocks=args.blocks)
    env = dict(os.environ)
    if args.device == "cpu" and STAGES.index(stage) >= STAGES.index("heap"):
        env["GLIBC_TUNABLES"] = CPU_HEAP_TUNABLES
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=args.timeout,
                          check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"stage {stage}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", type=Path)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated, of " + ", ".join(STAGES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--timer", choices=("loop", "ours"), default="loop",
                        help="loop: perf_counter around each call after a synchronise; ours: the evaluator's "
                             "timing.time_callable over 4 input sets, its host median (the series a host-timed "
                             "reward stands on)")
    parser.add_argument("--blocks", type=int, default=5, help="consecutive blocks whose medians each child reports")
    parser.add_argument("--pin", type=int, default=None, help="run every child on this one CPU")
    parser.add_argument("--threads", type=int, default=1, help="torch threads in every stage (the children's)")
    parser.add_argument("--max-elements", type=int, default=None, help="scale the task down (a CPU smoke)")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", type=Path, default=None, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    stages = [s.strip() for s in args.stages.split(",") if s.strip()]
    unknown = sorted(set(stages) - set(STAGES))
    if unknown or "plain" not in stages:
        parser.error(f"--stages must name plain and only {', '.join(STAGES)} (got {', '.join(unknown) or 'no plain'})")
    if not args.task.is_file():
        parser.error(f"{args.task}: no such task file")
    constants: dict[str, int] = {}
    if args.max_elements:
        sys.path.insert(0, str(ROOT))
        from gpu_workers.child.size import constant_names, shrink, size_constants
        from gpu_workers.tasks import load_task_module

        source = args.task.read_text()
        task = load_task_module(source, None)
        constants, _ = shrink(task, size_constants(task, constant_names(source)), args.max_elements)
    figures: dict[str, list[dict[str, float]]] = {s: [] for s in stages}
    for repeat in range(args.repeat):
        order = stages[repeat % len(stages):] + stages[:repeat % len(stages)]
        medians = {}
        for stage in order:
            summary = run_stage(stage, args, constants)
            medians[stage] = summary["median_ms"]
            figures[stage].append(summary)
        line = "  ".join(f"{s} {medians[s]:.3f} ms ({medians[s] / medians['plain']:.2f}x)" for s in stages)
        print(f"repeat {repeat + 1}: {line}", flush=True)
    ratios = {s: statistics.median(f["median_ms"] / p["median_ms"] for f, p in zip(figures[s], figures["plain"]))
              for s in stages}
    print("median ratio to plain: " + ", ".join(f"{s} {r:.3f}" for s, r in ratios.items()))
    if args.out:
        args.out.write_text(json.dumps({"task": str(args.task), "device": args.device, "figures": figures,
                                        "ratios": ratios, "constants": constants, "timer": args.timer}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
