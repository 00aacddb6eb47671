"""Entry point of every sandboxed child: ``python -m gpu_workers._child ROLE IN_FD OUT_FD``.

Roles:
- ``compile``: import the candidate with the GPU hidden, so its extensions build into the cache;
- ``reference``: trusted; builds inputs from secret seeds, reference outputs (fp32 and fp64),
  FLOP and byte counts, and times the baselines;
- ``candidate``: imports the candidate AFTER the judge bound its functions, runs the trials with
  guards, times it, and streams raw observations to the parent, which alone gives the verdict.
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import traceback
from typing import Any

from . import channel, sandbox


def _harden_process() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    limit = int(os.environ.get("KA_ADDRESS_LIMIT", "0") or 0)
    if limit > 0:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)  # die with the parent
    except (OSError, AttributeError):
        pass


def _confine_candidate_code(kernel_source: str) -> None:
    """Before any candidate code runs in this process: writes only beneath its own working folder,
    its build folder, its own compiler caches and /dev (``confine``). The compiler caches
    (``torch.compile``, Triton) are this source's alone (``<cache>/candidates/<source hash>``): a
    candidate cannot plant a cache entry that another candidate's compile would pick up. The
    reference's ``torch.compile`` cache, other candidates' builds and caches, the bridge and the kept
    timings are out of reach."""
    import hashlib

    from . import confine

    shared = os.environ.get("KERNELCOURT_CACHE_DIR")
    allowed = [os.getcwd(), "/dev"]
    if shared:
        key = hashlib.sha256(kernel_source.encode("utf-8", "surrogatepass")).hexdigest()[:24]
        caches = os.path.join(shared, "candidates", key)
        for name, sub in (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton")):
            os.environ[name] = os.path.join(caches, sub)
            os.makedirs(os.environ[name], exist_ok=True)
        allowed.append(caches)
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        allowed.append(os.environ["TORCH_EXTENSIONS_DIR"])
    print(f"[kernelcourt] {confine.confine_writes(allowed)}", file=sys.stderr, flush=True)


def _short_traceback(exc: BaseException, limit: int = 6000) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-limit:]


def _is_build_error(exc: BaseException) -> bool:
    import subprocess

    if isinstance(exc, subprocess.CalledProcessError):
        return True
    text = str(exc)
    return "Error building extension" in text or "error: command" in text or "ninja: build stopped" in text


class _Sender:
    """Numbered, authenticated messages on the private channel; the parent checks order and HMAC.

    The key and the serialiser are bound here, before any candidate code runs, and the sender lives
    only in main()'s locals, which the audit guard keeps out of the candidate's reach.
    """

    def __init__(self, fd: int, key: bytes | None, in_fd: int = -1):
        import torch

        self._fd = fd
        self._in_fd = in_fd
        self._key = key
        self._save = torch.save
        self._write = sandbox.write_message
        self._read = os.read
        self.seq = 0

    def __call__(self, phase: str, **payload: Any) -> None:
        self.seq += 1
        self._write(self._fd, {"phase": phase, "seq": self.seq, **payload}, self._key, self._save)

    def _wait_go(self, why: str) -> None:
        if self._in_fd < 0 or self._read(self._in_fd, 1) != b"g":
            raise RuntimeError(f"the parent did not give its go {why}")

    def gpu_alone(self) -> None:
        """Ask the parent for the GPU to ourselves (a timing) and wait until it says go; until
        then other evaluations' work may be running on it (gpuslot)."""
        self("want_gpu")
        self._wait_go("for timing")

    def pause(self, phase: str, **payload: Any) -> None:
        """A message sent at a pause point (all GPU work so far synchronised), then wait for the
        parent's go: meanwhile a timing of another evaluation may have the GPU (gpuslot)."""
        self(phase, **payload)
        self._wait_go(f"after {phase!r}")


# ---- compile ---------------------------------------------------------------------------------
def _role_compile(setup: dict[str, Any], send: _Sender) -> None:
    import time

    from . import fastbuild
    from .tasks import exec_source

    start = time.perf_counter()
    for key, value in (setup.get("env") or {}).items():  # this build's folders and flags (a spare started
        if value is None:                                  # before they were known)
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    from . import litebuild

    if fastbuild.install() and litebuild.enabled():
        try:  # the bridge is ours: built (once per toolchain) or loaded before the confinement
            litebuild.bridge_module(setup.get("device") == "cuda")
        except Exception as exc:  # noqa: BLE001 - the light build will fail over to the next build
            print(f"[kernelcourt] no light-build bridge: {exc}"[:2000], file=sys.stderr, flush=True)
    if int(setup.get("nice") or 0) > 0:  # after the bridge, which every first build waits for
        os.nice(int(setup["nice"]))      # inherited by the compilers this child runs
    _confine_candidate_code(setup["kernel_source"])
    try:
        exec_source(setup["kernel_source"], "kernelcourt_candidate", "<kernel>")
    except BaseException as exc:  # noqa: BLE001 - candidate code
        send("compile_failed", build_error=_is_build_error(exc), error=_short_traceback(exc))
        return
    elapsed = time.perf_counter() - start
    print(f"[kernelcourt] the compile child ran the candidate's module in {elapsed:.2f} s", file=sys.stderr, flush=True)
    send("compiled", ms=elapsed * 1e3)


# ---- shared helpers ----------------------------------------------------------------------------
def _device(setup: dict[str, Any]):
    import torch

    device = torch.device(setup["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.empty(1, device=device)  # create the context before anything else
    return device


def _prepare_torch(setup: dict[str, Any]) -> None:
    import torch

    torch.set_num_threads(int(setup.get("threads", 1)))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.randn(1 << 18).sum()  # start the intra-op thread pool before any counting


def _timing_switches(setup: dict[str, Any]) -> dict[str, Any]:
    return {"settle_within": float(setup.get("settle_within", 0.01)), "spin_waits": bool(setup.get("spin_waits", True)),
            "cpus": [int(c) for c in setup.get("cpus") or ()] or None, "e2e_rotations": int(setup.get("e2e_rotations", 0))}


def _fresh(values: list[Any], device) -> list[Any]:
    """A private copy for one use: a model may write into its inputs."""
    import torch

    return [v.to(device, copy=True) if isinstance(v, torch.Tensor) else v for v in values]


def _make_inputs(task, seed: int, device) -> list[Any]:
    """One input set from a secret seed, made on the task's device. The reference and the
    candidate's judge both call this (the judge before any candidate code runs), so both sides hold
    the same values without shipping gigabytes through the parent."""
    import torch

    torch.manual_seed(seed)
    with device:  # factory functions in get_inputs() allocate on the task's device (fast on a GPU)
        values = task.get_inputs()
    return [v.detach() if isinstance(v, torch.Tensor) else v for v in values]


def _secret_reseed() -> None:
    import random

    import torch

    seed = int.from_bytes(os.urandom(8), "little") & ((1 << 63) - 1)
    torch.manual_seed(seed)
    random.seed(os.urandom(16))
    try:
        import numpy

        numpy.random.seed(int.from_bytes(os.urandom(4), "little"))
    except ImportError:
        pass


# ---- reference -------------------------------------------------------------------------------
def _reference_work(setup: dict[str, Any], send: _Sender) -> None:
    """Everything the reference reports but its final ``done``."""
    import copy

    import torch

    from . import measure, timing
    from .tasks import load_task_module

    device = _device(setup)
    _prepare_torch(setup)
    task = load_task_module(setup["task_source"], setup.get("profile"))
    seeds = setup["seeds"]

    torch.manual_seed(seeds["init"][0])
    init_inputs = list(task.get_init_inputs())
    models, state_dicts = [], []
    for config, init_seed in enumerate(seeds["init"]):
        torch.manual_seed(init_seed)
        model = task.Model(*init_inputs).to(device).eval()
        if config > 0:
            _perturb_parameters(model)
        models.append(model)
        state_dicts.append({k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()})

    models64: list[Any] = []
    fp64_error = ""
    if setup.get("fp64", True):
        try:
            models64 = [copy.deepcopy(m).double() for m in models]
        except Exception as exc:  # noqa: BLE001
            fp64_error = f"no float64 reference: {exc}"
    measure.synchronize(device)
    send.pause("checkpoint", step="models")

    def run(config: int, inputs: list[Any], wide: bool = True) -> dict[str, Any]:
        with torch.no_grad():
            on_device = _fresh(inputs, device)
            out = measure.to_cpu(measure.flatten(models[config](*on_device)))
            out64: list[Any] | None = None
            if models64 and wide:
                try:
                    wide = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                            for v in on_device]
                    out64 = measure.to_cpu(measure.flatten(models64[config](*wide)))
                except Exception:  # noqa: BLE001 - some ops have no float64 kernel
                    out64 = None
        return {"config": config, "outputs": out, "outputs64": out64}

    trial_inputs = [_make_inputs(task, seed, device) for _, seed in seeds["trials"]]
    trials = []
    for (config, _), inputs in zip(seeds["trials"], trial_inputs):
        trials.append(run(config, inputs))
        send.pause("checkpoint", step="trial")  # run() ends with a copy to the CPU: nothing left queued
    # Timing inputs are checked against the fp32 reference; float64 is needed for the trials only.
    rotation_inputs = [_make_inputs(task, seed, device) for seed in seeds["rotations"]]
    rotations = [run(0, inputs, wide=False) for inputs in rotation_inputs]
    after = run(0, _make_inputs(task, seeds["after"], device), wide=False)

    # FLOPs and bytes for the roofline floor (the parent keeps the FLOP count per task: None here
    # when it already has it, or when counting failed).
    flops: int | None = None
    if setup.get("count_flops", True):
        try:
            from torch.utils.flop_counter import FlopCounterMode

            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                models[0](*_fresh(trial_inputs[0], device))
            flops = int(counter.get_total_flops())
        except Exception:  # noqa: BLE001
            flops = None
    nbytes = sum(v.numel() * v.element_size() for v in trial_inputs[0] if isinstance(v, torch.Tensor))
    nbytes += sum(v.numel() * v.element_size() for v in state_dicts[0].values())
    nbytes += sum(v.numel() * v.element_size() for v in trials[0]["outputs"] if isinstance(v, torch.Tensor))
    measure.synchronize(device)
    send.pause("checkpoint", step="outputs")  # a timing already waiting goes before the large message below

    # The parent lets the GPU go while this large message travels, and takes it back (shared) before
    # its go: the baselines' work and the end's cache release are GPU work.
    send.pause("reference", init_inputs=init_inputs, state_dicts=state_dicts, trials=trials,
               rotations=rotations, after=after, flops=flops, bytes=int(nbytes), fp64_error=fp64_error)

    # Baselines, each announced so the parent can hold its own wall clock against the report.
    for name in setup.get("baselines", []):
        try:
            fn = _baseline_callable(name, models[0], device, rotation_inputs)
            buffers = _fresh(rotation_inputs[0], device)
            with torch.no_grad():
                fn(*buffers)  # compile / capture outside the measurement
                send.gpu_alone()
                send("timing_begin", baseline=name)
                stats = timing.time_callable(fn, buffers, [_fresh(r, device) for r in rotation_inputs], device,
                                              budget_s=float(setup["timing_budget_s"]),
                                              max_iters=int(setup.get("max_iters", 1000)),
                                              warmup_inputs=_fresh(trial_inputs[0], device),
                                              **_timing_switches(setup))
            stats.pop("kept_outputs")
            send.pause("timing_end", baseline=name, stats=stats)  # the next baseline's work waits for shared
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
            send("baseline_failed", baseline=name, error=_short_traceback(exc, 2000))


def _role_reference(setup: dict[str, Any], send: _Sender) -> None:
    import torch

    _reference_work(setup, send)
    send("done")
    # After the done, so outside the slot (as a context's end is: gpuslot.contexts_held): a child kept
    # for the next evaluation holds no GPU memory while it waits.
    try:
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - nothing more may follow the done; the next setup finds out
        pass


def _perturb_parameters(model) -> None:
    """A second weight configuration that differs in EVERY floating parameter, including the ones
    a constructor sets to constants (LayerNorm's ones and zeros), so shortcuts on them show."""
    import torch

    with torch.no_grad():
        for param in model.parameters():
            if param.is_floating_point() and param.numel():
                scale = float(param.abs().mean()) or 1.0
                param.add_(torch.randn_like(param) * (0.1 * scale))


def _baseline_callable(name: str, model, device, rotation_inputs):
    import torch

    if name == "eager":
        return model
    if name.startswith("compile"):
        mode = {"compile": None, "compile_reduce_overhead": "reduce-overhead",
                "compile_max_autotune": "max-autotune"}[name]
        return torch.compile(model, mode=mode)
    if name == "cuda_graph":
        if device.type != "cuda":
            raise RuntimeError("a CUDA-graph baseline needs a CUDA device")
        static_in = _fresh(rotation_inputs[0], device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(3):
                model(*static_in)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.no_grad():
            static_out = model(*static_in)

        def replay(*buffers):
            for dst, src in zip(static_in, buffers):
                if isinstance(dst, torch.Tensor) and dst.data_ptr() != src.data_ptr():
                    dst.copy_(src)
            graph.replay()
            return static_out

        return replay
    raise ValueError(f"unknown baseline {name!r}")


# ---- candidate -------------------------------------------------------------------------------
def _role_candidate(setup: dict[str, Any], send: _Sender) -> None:
    # Everything the judge calls is bound by these imports, before the candidate's code runs.
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from . import fastbuild, measure, timing
    from .guard import install as install_guard
    from .tasks import exec_source, load_task_module

    device = _device(setup)
    # After the CUDA context exists (CUDA's initialisation fails under the confinement: see
    # bench/confine_cuda.py), before any candidate code: the driver's own threads stay unconfined.
    _confine_candidate_code(setup["kernel_source"])
    _prepare_torch(setup)
    measure.tune_cpu_heap()
    low_precision = {torch.float16, torch.bfloat16, getattr(torch, "float8_e4m3fn", torch.float16),
                     getattr(torch, "float8_e5m2", torch.float16)}

    class OpTracer(TorchDispatchMode):
        """Records every ATen op that reaches the dispatcher inside forward."""

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # Else torch wraps __torch_dispatch__ in _disable_dynamo, whose first call imports
            # torch._dynamo (sympy's import reads frames, which the guard refuses in candidate code,
            # and it costs over a second per child). This is torch's behaviour before that wrapper.
            return False

        def __init__(self) -> None:
            super().__init__()
            self.ops: dict[str, int] = {}
            self.downcasts: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            packet = func.overloadpacket
            namespace = getattr(func, "namespace", "aten")
            name = f"{namespace}::{packet.__name__}"
            self.ops[name] = self.ops.get(name, 0) + 1
            if packet.__name__ in ("_to_copy", "to") and kwargs.get("dtype") in low_precision:
                self.downcasts.append(f"{name} -> {kwargs.get('dtype')}")
            return func(*args, **kwargs)

    trace_enabled = bool(setup.get("trace_ops", True))
    # The inputs, from the secret seeds, before any candidate code exists in this process.
    task = load_task_module(setup["task_source"], setup.get("profile"))
    seeds = setup["seeds"]
    trial_inputs = [_make_inputs(task, seed, device) for _, seed in seeds["trials"]]
    rotation_inputs = [_make_inputs(task, seed, device) for seed in seeds["rotations"]]
    after_inputs = _make_inputs(task, seeds["after"], device)
    sys.modules.pop("kernelcourt_task", None)
    del task
    measure.synchronize(device)
    send.pause("prepared")
    held: list[list[Any]] = []

    def fresh(values: list[Any]) -> list[Any]:
        """A private copy for one use, kept alive to the end: no two uses share an address, so a
        cache keyed on data pointers sees every input as new (and is caught by the timing checks)."""
        copy = _fresh(values, device)
        held.append(copy)
        return copy

    fastbuild.install()  # the same sources as the compile phase built: the build is found, not redone
    _secret_reseed()
    measure.watch_modules("gpu_workers")
    guard = install_guard()

    def describe(exc: BaseException) -> str:
        with guard.exempt():  # formatting a traceback reads frames
            return _short_traceback(exc)

    # 1. import and construct
    try:
        module = exec_source(setup["kernel_source"], "kernelcourt_candidate", "<kernel>")
        model_cls = module.ModelNew
        measure.synchronize(device)  # whatever the import queued: nothing is left on the GPU at the pause
    except BaseException as exc:  # noqa: BLE001
        send("error", where="import", build_error=_is_build_error(exc), error=describe(exc))
        return
    send.pause("imported")
    patched: set[str] = set(measure.patched_attributes())

    def build(config: int):
        with guard.exempt():  # torch.manual_seed records a stack (frames) for lazy CUDA seeding
            torch.manual_seed(setup["init_seeds"][config])
        model = model_cls(*setup["init_inputs"])
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"ModelNew(...) returned a {type(model).__name__}, not an nn.Module")
        state = setup["state_dicts"][config]
        own = model.state_dict()
        shared = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
        if shared:
            model.load_state_dict(shared, strict=False)
        return model.to(device).eval()

    try:
        models = {config: build(config) for config in sorted({t["config"] for t in setup["trials"]} | {0})}
        measure.synchronize(device)
    except BaseException as exc:  # noqa: BLE001
        send("error", where="construct", build_error=False, error=describe(exc))
        return
    send.pause("built")
    with guard.exempt():
        _secret_reseed()
    poisoner = measure.Poisoner(device, int(setup.get("poison_bytes", 1 << 20)))

    # 2. warm-up outside every check (lazy library initialisation is not a hack), on inputs the
    # candidate sees anyway (trial 1's), never on the timing inputs; then no new processes.
    try:
        with torch.no_grad():
            models[0](*fresh(trial_inputs[0]))
        measure.synchronize(device)
    except BaseException as exc:  # noqa: BLE001
        send("error", where="forward", build_error=False, error=describe(exc))
        return
    guard.seal()
    send.pause("ready", patched=sorted(patched | set(measure.patched_attributes())))

    def guarded(model, inputs: list[Any], trace: bool) -> dict[str, Any]:
        poisoner.poison()
        threads_before = measure.thread_count()
        kids_before = measure.child_pids()
        inputs_before = measure.snapshot(inputs)
        tracer = OpTracer() if trace else None
        with torch.no_grad():
            if tracer is not None:
                with tracer:
                    out = model(*inputs)
            else:
                out = model(*inputs)
        measure.synchronize(device)
        leaves = measure.flatten(out)
        kinds = []
        for leaf in leaves:  # exact type and real storage, before anything else touches the output
            if type(leaf) is not torch.Tensor:
                kinds.append(f"{type(leaf).__module__}.{type(leaf).__qualname__}")
            elif leaf.is_meta or leaf.device.type != device.type:
                kinds.append(f"tensor on {leaf.device}")
            elif not measure.has_storage(leaf):
                kinds.append("tensor without materialised storage")
            else:
                kinds.append("tensor")
        first = measure.snapshot(leaves)
        mutated = not measure.same_values(measure.snapshot(inputs), inputs_before)
        measure._sleep(float(setup.get("settle_s", 0.02)))
        measure.synchronize(device)
        later = measure.snapshot(leaves)
        changed = not measure.same_values(later, first)
        return {
            "outputs": measure.to_cpu(first),
            "kinds": kinds,
            "input_mutated": mutated,
            "changed_after_return": changed,
            "new_threads": measure.thread_count() - threads_before,
            "new_processes": len(measure.child_pids() - kids_before),
            "ops": dict(tracer.ops) if tracer else {},
            "downcasts": list(tracer.downcasts) if tracer else [],
        }

    # 3. correctness trials, each on fresh secret inputs, candidate first (the reference ran elsewhere)
    for index, trial in enumerate(setup["trials"]):
        try:
            observed = guarded(models[trial["config"]], fresh(trial_inputs[index]), trace_enabled)
        except BaseException as exc:  # noqa: BLE001
            send("error", where=f"trial {index}", build_error=False, error=describe(exc))
            return
        send.pause("trial", index=index, **observed)  # guarded() synchronised the device
    patched |= set(measure.patched_attributes())

    # 4. timing: new values in the same buffers every iteration; outputs kept for the parent
    rotations = [fresh(r) for r in rotation_inputs]
    buffers = fresh(rotation_inputs[0])
    model = models[0]
    try:
        send.gpu_alone()
        send("timing_begin")
        with torch.no_grad():
            stats = timing.time_callable(model, buffers, rotations, device,
                                          budget_s=float(setup["timing_budget_s"]),
                                          max_iters=int(setup.get("max_iters", 1000)),
                                          warmup_inputs=fresh(trial_inputs[0]), **_timing_switches(setup))
    except BaseException as exc:  # noqa: BLE001
        send("error", where="timing", build_error=False, error=describe(exc))
        return
    kept = stats.pop("kept_outputs")
    send.pause("timing_end", stats=stats)  # small and at once: the parent's wall clock stops here
    send.pause("timing_outputs", kept_outputs=[measure.to_cpu(k) for k in kept])
    patched |= set(measure.patched_attributes())

    # 5. after timing: a fresh input, then trial 0 again (determinism, poisoned in between)
    try:
        after = guarded(model, fresh(after_inputs), False)
        again = guarded(models[setup["trials"][0]["config"]], fresh(trial_inputs[0]), False)
    except BaseException as exc:  # noqa: BLE001
        send("error", where="after timing", build_error=False, error=describe(exc))
        return
    patched |= set(measure.patched_attributes())
    send.pause("after", after=after, again=again)  # guarded() synchronised the device
    send("done", patched=sorted(patched), blocked=guard.violations)


_ROLES = {"compile": _role_compile, "reference": _role_reference, "candidate": _role_candidate}
# Imported while the child waits for its setup (a spare, or a child started early), not after it
# arrives (no candidate code runs before).
_PRELOAD = {"compile": ("fastbuild", "tasks"), "reference": ("measure", "timing", "tasks"),
            "candidate": ("measure", "timing", "tasks", "guard", "fastbuild")}
# Imported by the child itself, never by the zygote: torch.utils.cpp_extension (which the candidate's
# load_inline and our fast build need, ~0.1-0.2 s of CPU) asks CUDA for its devices at import
# (torch.cuda.is_available, once it finds CUDA_HOME), which a process that forks children must not do.
_PRELOAD_OWN = {"compile": ("torch.utils.cpp_extension",), "candidate": ("torch.utils.cpp_extension",)}


def _preload(role: str, own: bool = False) -> None:
    """Our modules for ``role`` (what the zygote imports too); with ``own``, also those only a
    child may import."""
    import importlib

    for name in _PRELOAD.get(role, ()):
        importlib.import_module(f"{__package__ or 'gpu_workers'}.{name}")
    for name in _PRELOAD_OWN.get(role, ()) if own else ():
        importlib.import_module(name)


LAZY_MODULES = ("sympy", "torch.utils.flop_counter")


def warm_lazy_imports() -> list[str]:
    """What torch imports on first use rather than at import: the reference's FLOP counter pulls in
    some 800 modules (sympy, dynamo's and inductor's pieces) on its first count, about a second of
    CPU. A reference child started by a worker's warm-up does it then, after its own CUDA context
    exists (never in the zygote: some of those modules may ask CUDA about its devices, and a process
    forked after the driver's initialisation cannot use CUDA). Our own call on two CPU numbers, no
    task code. Returns which of LAZY_MODULES are loaded."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False), torch.no_grad():
        torch.nn.functional.linear(torch.ones(1, 2), torch.ones(2, 2))
    return sorted(m for m in LAZY_MODULES if m in sys.modules)


def _warm(role: str, setup: dict[str, Any], out_fd: int) -> None:
    """Make the CUDA context before the setup comes (the parent holds the GPU shared meanwhile) and
    say so: the context is then ready when the candidate's (or a kept reference child's first
    evaluation's) turn comes. No task or candidate code."""
    import torch

    _device({"device": setup["warm"]})
    reply: dict[str, Any] = {"phase": "warm"}
    if role == "reference":
        reply["lazy"] = warm_lazy_imports()
    gc.freeze()  # what the warm-up made lives as long as the process: the collector skips it from now on
    sandbox.write_message(out_fd, reply, None, torch.save)


def _serve_one(role: str, setup: dict[str, Any], in_fd: int, out_fd: int) -> int:
    send = _Sender(out_fd, setup.pop("mac_key", None), in_fd)  # later reads: the parent's go for timing
    try:
        _ROLES[role](setup, send)
    except BaseException as exc:  # noqa: BLE001 - report, never hang the parent
        try:
            try:
                text = _short_traceback(exc)
            except Exception:  # noqa: BLE001 - the audit guard may refuse to read frames here
                text = f"{type(exc).__name__}: {exc}"
            send("error", where="judge", build_error=False, error=text)
        except OSError:
            pass
        return 1
    return 0


def main(argv: list[str]) -> int:
    role, in_fd, out_fd = argv[0], int(argv[1]), int(argv[2])
    _harden_process()
    import torch  # noqa: F401 - before the setup arrives: the parent may hold it until the GPU is free
    _preload(role, own=True)
    gc.freeze()  # torch and ours (a zygote froze its own already): never walked by a collection
    setup = channel.read_message(in_fd)
    if role in ("candidate", "reference") and "warm" in setup:
        _warm(role, setup, out_fd)
        setup = channel.read_message(in_fd)
    if role == "compile":
        os.close(in_fd)
        in_fd = -1
    while True:
        code = _serve_one(role, setup, in_fd, out_fd)
        if code or role != "reference" or not setup.get("serve"):
            return code
        # A reference child serves the next evaluation (refpool); the parent closes the pipe or kills it.
        try:
            setup = channel.read_message(in_fd)
        except (OSError, EOFError, channel.FormatError):
            return 0


if __name__ == "__main__":
    sys.stdout.flush()
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)  # skip interpreter teardown: candidate atexit hooks and thread joins don't run
