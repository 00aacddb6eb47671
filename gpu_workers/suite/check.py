"""Check the suite's reference kernels against their tasks, without the evaluator.

    python -m gpu_workers.suite.check --device cpu [--only NAME ...] [--profile cpu|cuda]

For each task: load the task file with its size profile applied, seed, build ``Model`` and
``ModelNew`` (the reference kernel for the device, built with ``load_inline`` at import; the
reference's state dict is copied in with ``strict=False``), compare outputs on fresh random inputs
with ``torch.allclose`` and time one forward of each. Prints a table; exits 1 if any task failed.

C++/CUDA builds are cached in ``--build-dir`` (default ``$TORCH_EXTENSIONS_DIR`` or /tmp/suite_ext),
so a re-run does not rebuild.
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import sys
import time
import traceback
import types
from dataclasses import dataclass
from typing import Any

from gpu_workers.suite import SuiteTask, get_task, list_tasks


def load_source_module(
    source: str, module_name: str, filename: str, profile: str | None = None
) -> types.ModuleType:
    """Exec ``source`` in a fresh module; then overwrite its globals with ``PROFILES[profile]``."""
    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module  # dataclasses, pickling and torch.compile look modules up
    exec(compile(source, filename, "exec"), module.__dict__)
    if profile is not None:
        profiles = getattr(module, "PROFILES", None)
        if profiles is not None:
            if profile not in profiles:
                raise KeyError(f"{filename}: no profile {profile!r} in PROFILES ({sorted(profiles)})")
            for key, value in profiles[profile].items():
                setattr(module, key, value)
    return module


@dataclass
class CheckRow:
    name: str
    level: int
    ok: bool
    detail: str
    max_abs_err: float | None = None
    build_s: float | None = None
    ref_ms: float | None = None
    kernel_ms: float | None = None


def _median_ms(fn: Any, args: list, device: str, repeats: int) -> float:
    import torch

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    fn(*args)  # warm-up
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def check_task(
    task: SuiteTask,
    device: str,
    profile: str,
    trials: int,
    repeats: int,
    overrides: dict[str, Any] | None = None,
    kernel_source: str | None = None,
) -> CheckRow:
    """Check one task's kernel (its reference kernel for ``device`` unless ``kernel_source`` is given)."""
    import torch

    row = CheckRow(name=task.name, level=task.level, ok=False, detail="")
    task_mod = load_source_module(task.task_source, f"arena_task_{task.name}", str(task.task_path), profile)
    for key, value in (overrides or {}).items():
        if hasattr(task_mod, key):  # a size this task has; other tasks keep their profile's
            setattr(task_mod, key, value)
    kernel_path = task.cpu_kernel_path if device == "cpu" else task.cuda_kernel_path
    start = time.perf_counter()
    try:
        kernel_mod = load_source_module(
            task.kernel_source(device) if kernel_source is None else kernel_source,
            f"arena_kernel_{task.name}_{device}",
            str(kernel_path) if kernel_source is None else "<kernel>",
        )
    except Exception as exc:  # a build error is this task's failure, not the whole run's
        row.detail = f"build failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200]}"
        return row
    row.build_s = time.perf_counter() - start

    init_inputs = task_mod.get_init_inputs()
    torch.manual_seed(0)
    model = task_mod.Model(*init_inputs).to(device).eval()
    torch.manual_seed(0)
    model_new = kernel_mod.ModelNew(*init_inputs).to(device).eval()
    ref_state = model.state_dict()
    new_keys = set(model_new.state_dict())
    if new_keys != set(ref_state):  # the evaluator copies weights only when the names match
        row.detail = f"ModelNew's parameter names {sorted(new_keys)} differ from Model's {sorted(ref_state)}"
        return row
    model_new.load_state_dict(ref_state, strict=False)

    worst = 0.0
    with torch.no_grad():
        for trial in range(trials):
            torch.manual_seed(1000 + trial)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task_mod.get_inputs()]
            expected = model(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
            got = model_new(*inputs)
            if type(got) is not torch.Tensor or got.shape != expected.shape or got.dtype != expected.dtype:
                row.detail = (
                    f"trial {trial}: got {type(got).__name__} {getattr(got, 'shape', None)} "
                    f"{getattr(got, 'dtype', None)}, expected {tuple(expected.shape)} {expected.dtype}"
                )
                return row
            err = (got - expected).abs().max().item()
            worst = max(worst, err)
            if not torch.allclose(got, expected, atol=1e-4, rtol=1e-4):
                row.max_abs_err = worst
                row.detail = f"trial {trial}: mismatch, max abs err {err:.3g}"
                return row
        row.max_abs_err = worst
        row.ref_ms = _median_ms(model, inputs, device, repeats)
        row.kernel_ms = _median_ms(model_new, inputs, device, repeats)
    row.ok = True
    row.detail = "ok"
    return row


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[CheckRow], device: str, profile: str, extra: str = "") -> None:
    print(f"\nsuite check: device={device} profile={profile}{' ' + extra if extra else ''}")
    header = f"{'task':<20} {'lvl':>3} {'result':<6} {'max_abs_err':>11} {'build_s':>8} {'ref_ms':>9} {'kernel_ms':>9} {'ref/kern':>8}"
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = r.ref_ms / r.kernel_ms if r.ref_ms and r.kernel_ms else None
        print(
            f"{r.name:<20} {r.level:>3} {'ok' if r.ok else 'FAIL':<6} {_fmt(r.max_abs_err, '.2e'):>11} "
            f"{_fmt(r.build_s, '.1f'):>8} {_fmt(r.ref_ms, '.3f'):>9} {_fmt(r.kernel_ms, '.3f'):>9} {_fmt(ratio, '.2f'):>8}"
        )
        if not r.ok:
            print(f"    {r.detail}")
    print(f"{sum(r.ok for r in rows)}/{len(rows)} passed")


def _build_one(kernel_path: str, module_name: str) -> str:
    """Import one kernel file (which builds its extension into the cache); '' or the error's last line."""
    try:
        with open(kernel_path, encoding="utf-8") as fh:
            load_source_module(fh.read(), module_name, kernel_path)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:200] if str(exc).strip() else ''}"
    return ""


def prebuild(tasks: list[SuiteTask], device: str, jobs: int) -> None:
    """Build the kernels' extensions in ``jobs`` parallel processes, so the checks find them cached."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    paths = [str(t.cpu_kernel_path if device == "cpu" else t.cuda_kernel_path) for t in tasks]
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        errors = pool.map(_build_one, paths, [f"arena_prebuild_{t.name}" for t in tasks])
        for task, error in zip(tasks, errors):
            print(f"[build {task.name}] {error or 'ok'}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpu_workers.suite.check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--profile", choices=("cpu", "cuda"), default=None, help="size profile (default: the device's)"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="check only these tasks")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10, help="timed forwards per model (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads before checking")
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="override size constants after the profile (e.g. M=257 N=95), to try odd shapes",
    )
    parser.add_argument("--jobs", type=int, default=1, help="build the kernels in this many processes first")
    parser.add_argument("--build-dir", default=os.environ.get("TORCH_EXTENSIONS_DIR", "/tmp/suite_ext"))
    args = parser.parse_args(argv)

    try:
        tasks = [get_task(n) for n in args.only] if args.only else list_tasks()
    except KeyError as exc:
        parser.error(str(exc.args[0]))
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            parser.error(f"--set expects KEY=VALUE, got {item!r}")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parser.error(f"--set {key}: {value!r} is not a Python literal")
    os.environ["TORCH_EXTENSIONS_DIR"] = args.build_dir
    os.makedirs(args.build_dir, exist_ok=True)

    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda needs a CUDA build of torch and a GPU")
    if args.threads:
        torch.set_num_threads(args.threads)
    profile = args.profile or args.device
    if args.jobs > 1:
        prebuild(tasks, args.device, args.jobs)

    rows = []
    for task in tasks:
        try:
            row = check_task(task, args.device, profile, args.trials, args.repeats, overrides)
        except Exception as exc:
            traceback.print_exc()
            row = CheckRow(task.name, task.level, False, f"error: {type(exc).__name__}: {exc}"[:300])
        print(f"[{task.name}] {row.detail}", flush=True)
        rows.append(row)
    print_table(rows, args.device, profile, " ".join(args.set))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
