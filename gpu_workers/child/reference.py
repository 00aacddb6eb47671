"""The ``reference`` role (trusted): inputs from secret seeds, reference outputs in fp32 and fp64,
FLOP and byte counts, and the baselines' timings."""

from __future__ import annotations

import gc
import sys
from typing import Any

from .runtime import device_for, fresh_copy, make_inputs, prepare_torch, timing_switches
from .sender import Sender, short_traceback


def _reference_work(setup: dict[str, Any], send: Sender) -> None:
    """Everything the reference reports but its final ``done``."""
    import copy

    import torch

    from ..tasks import load_task_module
    from . import measure, timing

    device = device_for(setup)
    prepare_torch(setup)
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
            on_device = fresh_copy(inputs, device)
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

    trial_inputs = [make_inputs(task, seed, device) for _, seed in seeds["trials"]]
    trials = []
    for (config, _), inputs in zip(seeds["trials"], trial_inputs):
        trials.append(run(config, inputs))
        send.pause("checkpoint", step="trial")  # run() ends with a copy to the CPU: nothing left queued
    # Timing inputs are checked against the fp32 reference; float64 is needed for the trials only.
    rotation_inputs = [make_inputs(task, seed, device) for seed in seeds["rotations"]]
    rotations = [run(0, inputs, wide=False) for inputs in rotation_inputs]
    after = run(0, make_inputs(task, seeds["after"], device), wide=False)

    # FLOPs and bytes for the roofline floor (the parent keeps the FLOP count per task: None here
    # when it already has it, or when counting failed).
    flops: int | None = None
    if setup.get("count_flops", True):
        try:
            from torch.utils.flop_counter import FlopCounterMode

            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad():
                models[0](*fresh_copy(trial_inputs[0], device))
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
            buffers = fresh_copy(rotation_inputs[0], device)
            with torch.no_grad():
                fn(*buffers)  # compile / capture outside the measurement
                send.gpu_alone()
                send("timing_begin", baseline=name)
                stats = timing.time_callable(fn, buffers, [fresh_copy(r, device) for r in rotation_inputs], device,
                                              budget_s=float(setup["timing_budget_s"]),
                                              max_iters=int(setup.get("max_iters", 1000)),
                                              warmup_inputs=fresh_copy(trial_inputs[0], device),
                                              **timing_switches(setup))
            stats.pop("kept_outputs")
            send.pause("timing_end", baseline=name, stats=stats)  # the next baseline's work waits for shared
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
            send("baseline_failed", baseline=name, error=short_traceback(exc, 2000))


def role_reference(setup: dict[str, Any], send: Sender) -> None:
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
        static_in = fresh_copy(rotation_inputs[0], device)
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
