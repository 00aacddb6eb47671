"""The ``reference`` role (trusted): inputs from secret seeds, reference outputs in fp32 and fp64,
FLOP and byte counts, and the baselines' timings."""

from __future__ import annotations

import gc
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

from .isolation import Fingerprint, JustInTime
from .runtime import device_for, fresh_copy, make_inputs, prepare_torch, timing_switches
from .sender import Sender, short_traceback

ROTATION_STRETCH_S = 0.25  # how long the timing sets' reference outputs run between pause points


def _reference_work(setup: dict[str, Any], send: Sender) -> None:
    """Everything the reference reports but its final ``done``."""
    import copy

    import torch

    from ..tasks import load_task_module
    from . import measure, timing
    from .perturb import construct
    from .size import apply_constants

    prepare_torch(setup)
    task = load_task_module(setup["task_source"], setup.get("profile"))
    apply_constants(task, setup.get("constants"), setup["task_source"])
    seeds = setup["seeds"]

    # The models are built on the CPU (a large task's initialisation is seconds of CPU work) before
    # the GPU is asked for: on CUDA the parent takes it, shared, at this pause point, so a waiting
    # timer never waits for a neighbour's construction.
    torch.manual_seed(seeds["init"][0])
    init_inputs = list(task.get_init_inputs())
    models, state_dicts = [], []
    # Bound for a GPU, the state dicts keep the CPU tensors the models are built with (moving a model
    # makes new ones), so a task's parameters are on the host twice (two configurations), not four
    # times: level3/2 has 8.6 GB of them. Models that stay on the CPU get copies, untouched by forward.
    stays = torch.device(setup["device"]).type == "cpu"
    for config, init_seed in enumerate(seeds["init"]):
        torch.manual_seed(init_seed)
        # the second configuration is made while the model is built (perturb.py), as the candidate's is
        model = construct(lambda: task.Model(*init_inputs), init_seed if config > 0 else None).eval()
        models.append(model)
        state_dicts.append({k: v.detach().to("cpu", copy=stays) for k, v in model.state_dict().items()})
    send.pause("checkpoint", step="constructed")
    device = device_for(setup)
    models = [model.to(device) for model in models]

    models64: list[Any] = []
    fp64_error = ""
    if setup.get("fp64", True):
        try:
            models64 = [copy.deepcopy(m).double() for m in models]
        except Exception as exc:  # noqa: BLE001
            fp64_error = f"no float64 reference: {exc}"
    measure.synchronize(device)
    send.pause("checkpoint", step="models")

    fingerprint = Fingerprint(int(setup.get("fingerprint_seed", 0)))
    atol, rtol = float(setup.get("atol", 1e-2)), float(setup.get("rtol", 1e-2))
    # GPU-sized outputs stay on the device: the candidate's are compared here, against outputs made
    # again from the same seeds (``serve_comparisons``), and nothing of them travels to the parent.
    on_device = bool(setup.get("compare_on_device"))
    sizes: dict[str, int] = {}

    def run(config: int, inputs: list[Any], wide: bool = True, whole: bool = True) -> dict[str, Any]:
        with torch.no_grad():
            copied = fresh_copy(inputs, device)
            leaves = measure.flatten(models[config](*copied))
            prints = {"fingerprint": fingerprint.of(leaves), "bounds": Fingerprint.bounds(leaves, atol, rtol),
                      "spread": output_spread(leaves) if wide else None}
            if not sizes:
                sizes["inputs"] = _bytes(inputs)
                sizes["outputs"] = _bytes(leaves)
            out = measure.to_cpu(leaves) if whole and not on_device else None
            del leaves
            out64 = wide_outputs(config, copied) if wide and whole and not on_device else None
        return {"config": config, "outputs": out, "outputs64": out64, **prints}

    def wide_outputs(config: int, copied: list[Any], keep_on_device: bool = False) -> list[Any] | None:
        if not models64:
            return None
        try:
            wide = [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in copied]
            leaves = measure.flatten(models64[config](*wide))
            return leaves if keep_on_device else measure.to_cpu(leaves)
        except Exception:  # noqa: BLE001 - some ops have no float64 kernel
            return None

    # Every input set is made from its seed when it is needed and dropped after (isolation.JustInTime):
    # at most one set exists at a time, whatever the task's size.
    trial_inputs = JustInTime(lambda seed: make_inputs(task, seed, device), [seed for _, seed in seeds["trials"]])
    trials = []
    for index, (config, _) in enumerate(seeds["trials"]):
        trials.append(run(config, trial_inputs[index]))
        send.pause("checkpoint", step="trial")  # run() ends reading its results on the host: nothing queued
    # Timing inputs are checked against the fp32 reference (float64 is needed for the trials only):
    # whole where the candidate keeps them whole, by fingerprint everywhere. The sets kept whole are
    # answered now; with ``fingerprint_later`` set, the others' fingerprints only once the candidate's timing
    # says which sets it reached (``serve_comparisons``): a timing that settles stops after some 30 of
    # its 160 sets, and making the answers for all of them was most of the reference's work.
    rotation_inputs = JustInTime(lambda seed: make_inputs(task, seed, device), seeds["rotations"])
    whole = set(setup.get("keep_rotations", range(len(rotation_inputs))))
    later = bool(setup.get("fingerprint_later"))
    rotations: list[dict[str, Any] | None] = []
    stretch_began = time.monotonic()
    for r in range(len(rotation_inputs)):
        if later and r not in whole:
            rotations.append(None)
            continue
        rotations.append(run(0, rotation_inputs[r], wide=False, whole=r in whole))
        # up to 160 sets: on a GB-sized task seconds of GPU work, which a waiting timer need not wait for
        if time.monotonic() - stretch_began > ROTATION_STRETCH_S:
            measure.synchronize(device)
            send.pause("checkpoint", step="rotations")
            stretch_began = time.monotonic()
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
    nbytes = sizes["inputs"] + sizes["outputs"] + _bytes(list(state_dicts[0].values()))
    measure.synchronize(device)
    send.pause("checkpoint", step="outputs")  # a timing already waiting goes before the large message below

    # The parent lets the GPU go while this large message travels, and takes it back (shared) before
    # its go: the baselines' work and the end's cache release are GPU work.
    send.pause("reference", init_inputs=init_inputs, state_dicts=state_dicts, trials=trials,
               rotations=rotations, after=after, flops=flops, bytes=int(nbytes), fp64_error=fp64_error,
               output_bytes=sizes["outputs"], on_device=on_device)

    def time_baseline(name: str, fn: Any, buffers: list[Any], **pairing: Any) -> dict[str, Any]:
        """One timing of a baseline, its loop the candidate's: the candidate's loop fingerprints every
        output outside its windows, so this one does, or the loop overhead kept with the baseline
        (which the parent's wall clock check takes off the candidate's) would leave a GB-sized
        output's fingerprints unexplained, and an honest kernel flagged (timer_mismatch, seen on the
        H200); and it copies the outputs the candidate's keeps whole (on the CPU into this child's own
        outputs for those sets, sent already: timing's rooms). Only the loop's figures are returned:
        nothing checks a baseline's outputs."""
        stats = timing.time_callable(fn, buffers, rotation_inputs, device, keep=whole, fingerprint=fingerprint,
                                      rooms={r: rotations[r]["outputs"] for r in whole
                                             if device.type == "cpu" and rotations[r]["outputs"]},
                                      budget_s=float(setup["timing_budget_s"]),
                                      max_iters=int(setup.get("max_iters", 1000)),
                                      warmup_inputs=fresh_copy(trial_inputs[0], device),
                                      on_timed=lambda: send.timing_begin(baseline=name),
                                      on_busy=send.gpu_busy, **pairing, **timing_switches(setup))
        stats.pop("kept_outputs")
        stats.pop("fingerprints", None)
        return stats

    # Baselines, each announced so the parent can hold its own wall clock against the report.
    for name in setup.get("baselines", []):
        try:
            # a compile that tunes on the GPU while it compiles (max-autotune) keeps the GPU
            apart = name in ("compile", "compile_reduce_overhead")
            if apart:
                compile_imports_apart(send, device)
            fn = _baseline_callable(name, models[0], device, rotation_inputs)
            buffers = fresh_copy(rotation_inputs[0], device)
            with torch.no_grad():
                with compiling_apart(send, device) if apart else nullcontext():
                    fn(*buffers)  # compile / capture outside the measurement
                send.gpu_alone()
                stats = time_baseline(name, fn, buffers)
            send.pause("timing_end", baseline=name, stats=stats)  # the next baseline's work waits for shared
        except Exception as exc:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
            send("baseline_failed", baseline=name, error=short_traceback(exc, 2000))

    def time_pair(every: int) -> dict[str, Any]:
        """The eager baseline timed again, now, as one side of a pair timed in alternation with the
        candidate's timing (``pipeline/pairing.py``): the loop of the baseline phase above, in rounds."""
        fn = _baseline_callable("eager", models[0], device, rotation_inputs)
        buffers = fresh_copy(rotation_inputs[0], device)
        with torch.no_grad():
            fn(*buffers)
            # idle_rounds: nothing the candidate left may run in its rounds
            stats = time_baseline("eager", fn, buffers, on_round=send.round, round_every=every, idle_rounds=True)
        del fn, buffers
        measure.release_gpu_cache(device)
        return stats

    if on_device or later or setup.get("pair"):
        # It stays beside the candidate, whose room the announcement counts apart from this child's:
        # what the baselines left cached (a compiled graph's workspace, a CUDA graph's pool) goes first.
        fn = buffers = None
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        send("checking")
        serve_comparisons(send, device, models, run_inputs={
            "trial": lambda i: (seeds["trials"][i][0], trial_inputs[i]),
            "after": lambda _i: (0, make_inputs(task, seeds["after"], device))},
            wide_outputs=wide_outputs, atol=atol, rtol=rtol,
            fingerprint=lambda r: run(0, rotation_inputs[r], wide=False, whole=False), time_pair=time_pair)


def _bytes(values: list[Any]) -> int:
    import torch

    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def output_spread(leaves: list[Any]) -> list[list[float] | None]:
    """(standard deviation, mean absolute value) of each floating output, in float64 a chunk at a
    time (Chan's merge of per-chunk moments: a near-constant output keeps its small deviation, which
    a difference of sums would lose): the degenerate-task check's evidence, the same whether the
    outputs travel or stay on the device."""
    import torch

    out: list[list[float] | None] = []
    for leaf in leaves:
        if type(leaf) is not torch.Tensor or not leaf.is_floating_point() or leaf.numel() < 2:
            out.append(None)
            continue
        flat = leaf.detach().reshape(-1)
        chunk = 1 << 24 if flat.is_cuda else 1 << 20
        count, mean, m2, absolute = 0, 0.0, 0.0, 0.0
        for start in range(0, flat.numel(), chunk):
            part = flat[start:start + chunk].double()
            n = part.numel()
            part_mean = float(part.mean())
            part_m2 = float((part - part_mean).square_().sum())
            absolute += float(part.abs().sum())
            delta = part_mean - mean
            total = count + n
            mean += delta * n / total
            m2 += part_m2 + delta * delta * count * n / total
            count = total
        out.append([math.sqrt(m2 / (count - 1)), absolute / count])
    return out


def serve_comparisons(send: Sender, device, models: list[Any], run_inputs: dict[str, Any], wide_outputs: Any,
                      atol: float, rtol: float, fingerprint: Any, time_pair: Any = None) -> None:
    """Until the parent says finish, answer what the candidate phase asks of this task's reference:

    * ``{"fingerprints": [r, ...]}``: the fingerprint and bounds of the reference's output for each
      timing input set named (``fingerprint(r)``, made from the set's seed now), answered
      ``fingerprinted`` with ``rotations: [[r, fingerprint, bounds], ...]``;
    * ``{"compare": "trial" | "after" | "again", "index": i, "outputs": [...], "against": [...]}``:
      what the candidate's judge handed over on the device (``handover``) against this task's
      outputs for the same input set, made again from its seed ("again": the candidate's rerun of
      trial 1 against its own first answer, at the determinism tolerances the request names),
      answered ``compared`` with the comparison's fields;
    * ``{"pair": every}``: the eager baseline timed in alternation with the candidate's timing, in
      rounds of ``every`` iterations (``time_pair``), answered ``paired`` with its stats."""
    import torch

    from . import handover, measure
    from .compare import compare_outputs

    while True:
        request = send.receive()
        if type(request) is not dict or request.get("finish"):
            return
        if "pair" in request and time_pair is not None:
            try:
                stats = time_pair(int(request["pair"]))
            except Exception as exc:  # noqa: BLE001 - the candidate's timing goes on unpaired
                send("pair_failed", error=short_traceback(exc, 2000))
                continue
            send("paired", stats=stats)
            continue
        if "fingerprints" in request:
            answered = []
            for r in request["fingerprints"]:
                made = fingerprint(int(r))
                answered.append([int(r), made["fingerprint"], made["bounds"]])
            measure.synchronize(device)
            send("fingerprinted", rotations=answered)
            continue
        kind, index = request.get("compare"), request.get("index")
        try:
            if kind not in ("trial", "after", "again") or type(index) is not int or \
                    (kind == "trial" and not 0 <= index < 1024):
                raise handover.HandoverError(f"no such comparison: {kind!r} {index!r}")
            candidate = handover.open_outputs(request.get("outputs"), device)
            with torch.no_grad():
                if kind == "again":
                    expected, expected64 = handover.open_outputs(request.get("against"), device), None
                    tolerances = (float(request["atol"]), float(request["rtol"]))
                else:
                    config, inputs = run_inputs[kind](index)
                    copied = fresh_copy(inputs, device)
                    expected = measure.flatten(models[config](*copied))
                    expected64 = wide_outputs(config, copied, keep_on_device=True) if kind == "trial" else None
                    del copied, inputs
                    tolerances = (atol, rtol)
                result = compare_outputs(candidate, expected, expected64, *tolerances)
            answer = {"ok": result.ok, "reason": result.reason, "max_abs": result.max_abs,
                      "rel_norm": result.rel_norm, "ref_rel_norm": result.ref_rel_norm}
        except handover.HandoverError as exc:
            answer = {"ok": False, "reason": str(exc), "max_abs": 0.0, "rel_norm": 0.0, "ref_rel_norm": 0.0}
        candidate = expected = expected64 = None  # the mappings close before the candidate may go on
        measure.synchronize(device)
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.ipc_collect()
        send("compared", kind=kind, index=index, **answer)


def role_reference(setup: dict[str, Any], send: Sender) -> None:
    import torch

    from .measure import gpu_peak_bytes, release_cpu_heap

    if torch.cuda.is_initialized():  # a child lent again: this evaluation's peak is its own
        torch.cuda.reset_peak_memory_stats()
    _reference_work(setup, send)
    # Before the done (a few ms): what this evaluation freed is given back before the child can be
    # lent to the next one, whose memory limit is held against its resident size.
    release_cpu_heap()
    send("done", gpu_peak=gpu_peak_bytes())
    # After the done, so outside the slot (as a candidate context's end is): a child kept
    # for the next evaluation holds no GPU memory while it waits.
    try:
        gc.collect()
        if torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - nothing more may follow the done; the next setup finds out
        pass


COMPILE_MODULES = ("torch._dynamo", "torch._inductor.compile_fx")


def compile_imports_apart(send: Sender, device: Any) -> None:
    """What ``torch.compile()`` imports on its first use (some 650 modules: 2.7 s of CPU on the CPU
    machine, 6-8 s under sixteen evaluations' load on the H200, where it held the GPU shared, and so
    every waiting timer, for that long), imported with the GPU let go, once per process."""
    import importlib

    if all(m in sys.modules for m in COMPILE_MODULES):
        return
    from . import measure

    measure.synchronize(device)  # a pause point: this process's GPU work so far is done
    send.pause("compiling")
    try:
        for module in COMPILE_MODULES:
            importlib.import_module(module)
    except ImportError:  # a torch without inductor: its compile reports that itself
        pass
    finally:
        send.pause("compiled")


@contextmanager
def compiling_apart(send: Sender, device: Any) -> Iterator[None]:
    """Around a baseline's first call: while torch.compile traces and generates code (seconds to a
    minute of CPU work, no GPU work: the graph is traced with fake tensors), the GPU is let go, so
    a neighbour's waiting timing is not held back by a compile (a long stretch between pause
    points holds every timer, and behind the turnstile every evaluation, until it ends); it is
    taken back, shared, before the compiled code first runs (its launches, Triton's first-run
    tuning)."""
    try:
        from torch._dynamo.callback import CallbackTrigger, callback_handler
    except ImportError:  # a torch without compile callbacks: the compile holds the GPU
        yield
        return
    from . import measure

    def start(args: Any) -> None:
        if args.callback_trigger == CallbackTrigger.DYNAMO:
            measure.synchronize(device)  # a pause point: this process's GPU work so far is done
            send.pause("compiling")
            started.append(args.compile_id)

    def end(args: Any) -> None:
        if started and args.compile_id == started[-1]:
            started.pop()
            send.pause("compiled")  # the parent takes the GPU back (shared) before its go

    started: list[Any] = []
    callback_handler.register_start_callback(start)
    callback_handler.register_end_callback(end)
    try:
        yield
    finally:
        callback_handler.remove_start_callback(start)
        callback_handler.remove_end_callback(end)


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
