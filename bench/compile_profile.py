"""Where one candidate's build spends its CPU: the whole ``load_inline`` (our fastest build, as a
compile child runs it), then each command of its ninja file run again on its own, and for nvcc each
of its phases (``nvcc --time``). What is left of the whole after the commands is the Python side
(torch's ``load_inline`` machinery, our build planning, loading and binding).

    python bench/compile_profile.py --device cpu
    python bench/compile_profile.py --device cuda --repeat 3
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its reaped children's)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


def _commands(build_dir: Path) -> list[str]:
    out = subprocess.run(["ninja", "-C", str(build_dir), "-t", "commands"], check=True, capture_output=True,
                         text=True).stdout
    return [line for line in out.splitlines() if line.strip()]


def _label(command: str) -> str:
    words = shlex.split(command)
    tool = Path(words[0]).name
    target = words[words.index("-o") + 1] if "-o" in words else "?"
    return f"{tool} -> {target}"


def _run(command: str, build_dir: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and everything it ran)."""
    before, wall = _cpu()[1], time.perf_counter()
    subprocess.run(command, shell=True, cwd=build_dir, check=True, capture_output=True)
    return time.perf_counter() - wall, _cpu()[1] - before


def _nvcc_phases(command: str, build_dir: Path) -> tuple[list[tuple[str, float]], str]:
    """nvcc's own account of its phases (``--time``): seconds per phase, largest first, and the
    table's first lines as written (shown where its columns are not the ones looked for)."""
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = Path(tmp) / "phases.csv"
        subprocess.run(f"{command} --time {shlex.quote(str(csv_path))}", shell=True, cwd=build_dir, check=True,
                       capture_output=True)
        text = csv_path.read_text() if csv_path.exists() else ""
    rows = [[cell.strip() for cell in row] for row in csv.reader(text.splitlines()) if row]
    head = "\n".join(text.splitlines()[:3])
    if not rows:
        return [], head
    names = [cell.lower() for cell in rows[0]]
    phase = next((i for i, n in enumerate(names) if "phase" in n and "name" in n), None)
    value = next((i for i, n in enumerate(names) if n in ("metric", "time", "time(ms)") or "metric" in n), None)
    unit = next((i for i, n in enumerate(names) if n == "unit"), None)
    if phase is None or value is None:
        return [], head
    phases: dict[str, float] = {}
    for row in rows[1:]:
        try:
            seconds = float(row[value]) / (1e3 if unit is None or row[unit].lower() == "ms" else 1.0)
        except (ValueError, IndexError):
            continue
        phases[row[phase]] = phases.get(row[phase], 0.0) + seconds
    return sorted(phases.items(), key=lambda kv: -kv[1]), head


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each command (medians)")
    parser.add_argument("--no-lite-pch", dest="lite_pch", action="store_false",
                        help="without the light header precompiled (buildcache, kind=lite)")
    args = parser.parse_args()

    from bench.compile_speed import CPU_KERNEL, CUDA_KERNEL
    from gpu_workers.build import compile as build
    from gpu_workers.build import inline as fastbuild
    from gpu_workers.build import pch as buildcache
    from gpu_workers.build import toolchain
    from gpu_workers.hardware import hardware_info
    from gpu_workers.schema import EvalRequest

    template = CUDA_KERNEL if args.device == "cuda" else CPU_KERNEL
    source = template.replace("SCALEf", "(2.0f + 0.0f * 7)").replace("NAME", f"profile_{os.getpid()}_{int(time.time())}")
    hardware = hardware_info(args.device, 0 if args.device == "cuda" else None)
    request = EvalRequest(task_source="", kernel_source=source, device=args.device)
    if args.lite_pch:  # as a warmed-up worker has it (built once per toolchain)
        buildcache.pch_dir(toolchain.cache_root(), args.device, kind="lite")
    context = build.build_context(request, hardware)
    if not args.lite_pch:
        context.lite_pch = None
    env = build.child_env(request, hardware, context, hide_gpu=True)
    for key in ("TORCH_EXTENSIONS_DIR", "CPATH", "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "KERNELCOURT_CACHE_DIR",
                "KERNELCOURT_LITE_PCH"):
        if key in env:
            os.environ[key] = env[key]
    if not fastbuild.install():
        print("the fast build is not available with this torch: nothing to profile")
        return 1
    # the bridge is built once per toolchain: not this candidate's cost
    from gpu_workers.build import light as litebuild

    litebuild.bridge_module(args.device == "cuda")
    own0, kids0 = _cpu()
    wall0 = time.perf_counter()
    exec(compile(source, "<candidate>", "exec"), {"__name__": "candidate"})  # noqa: S102 - our own kernel
    wall = time.perf_counter() - wall0
    own1, kids1 = _cpu()
    whole = (own1 - own0) + (kids1 - kids0)
    print(f"the whole load_inline: {wall:.2f} s wall, {whole:.2f} CPU s (Python side {own1 - own0:.2f}, "
          f"commands {kids1 - kids0:.2f})", flush=True)
    folders = sorted(Path(os.environ["TORCH_EXTENSIONS_DIR"]).rglob("build.ninja"))
    if not folders:
        print("no ninja file found")
        return 1
    build_dir = folders[0].parent
    print(f"build folder: {build_dir.relative_to(os.environ['TORCH_EXTENSIONS_DIR'])}", flush=True)
    total = 0.0
    for command in _commands(build_dir):
        runs = [_run(command, build_dir) for _ in range(args.repeat)]
        wall_s, cpu_s = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        total += cpu_s
        print(f"  {_label(command)}: {wall_s:.2f} s wall, {cpu_s:.2f} CPU s", flush=True)
        if Path(shlex.split(command)[0]).name in ("c++", "g++") and " -c " in command:
            shown = subprocess.run(command + " -H", shell=True, cwd=build_dir, capture_output=True, text=True).stderr
            used = [line[2:] for line in shown.splitlines() if line.startswith("! ")]
            print(f"    precompiled header: {'used, ' + used[0] if used else 'none used'}", flush=True)
        if Path(shlex.split(command)[0]).name == "nvcc":
            phases, head = _nvcc_phases(command, build_dir)
            if phases:
                print("    nvcc phases (s): " + ", ".join(f"{name} {seconds:.3f}" for name, seconds in phases[:12]),
                      flush=True)
            else:
                print(f"    nvcc --time wrote (columns not understood):\n{head}", flush=True)
            print(f"    command: {command[:1500]}", flush=True)
    print(f"commands {total:.2f} CPU s of the whole {whole:.2f}: the Python side and ninja "
          f"{max(whole - total, 0.0):.2f} CPU s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
