"""The ``candidate`` role: binds the judge's functions, then imports the candidate, runs the trials
under the guards, times it, and streams raw observations to the parent, which alone gives the
verdict."""

from __future__ import annotations

import sys
from typing import Any

from .harden import confine_candidate_code
from .runtime import device_for, fresh_copy, make_inputs, prepare_torch, secret_reseed, timing_switches
from .sender import Sender, is_build_error, short_traceback


def role_candidate(setup: dict[str, Any], send: Sender) -> None:
    # Everything the judge calls is bound by these imports, before the candidate's code runs.
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from ..build import inline
    from ..tasks import exec_source, load_task_module
    from . import handover, measure, timing
    from .guard import install as install_guard
    from .isolation import (
        Fingerprint,
        JustInTime,
        OperatorSnapshot,
        copy_at_return,
        executable_mappings,
        judge_ops,
    )
    from .perturb import construct
    from .size import apply_constants
    from .watch import ForwardWatch

    device = device_for(setup)
    # After the CUDA context exists (CUDA's initialisation fails under the confinement: see
    # bench/confine_cuda.py), before any candidate code: the driver's own threads stay unconfined.
    writable = confine_candidate_code(setup["kernel_source"])
    prepare_torch(setup)
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
    apply_constants(task, setup.get("constants"), setup["task_source"])
    seeds = setup["seeds"]
    # Every input set is made from its seed as the judge reaches it (isolation.JustInTime): none exists
    # while the candidate imports or runs before its turn, and at most one set is held at a time. One
    # made after candidate code exists is made by the trusted task's own code; a candidate that
    # tampered with that making is answering other inputs than the reference's. The task module stays
    # in this closure only (not in sys.modules).
    trial_inputs = JustInTime(lambda seed: make_inputs(task, seed, device), [seed for _, seed in seeds["trials"]])
    rotation_inputs = JustInTime(lambda seed: make_inputs(task, seed, device), seeds["rotations"])
    after_inputs = JustInTime(lambda seed: make_inputs(task, seed, device), [seeds["after"]])
    sys.modules.pop("kernelcourt_task", None)
    measure.synchronize(device)
    send.pause("prepared")
    held: list[tuple[list[Any], int]] = []  # (copy, its bytes), oldest first
    hold_limit = int(setup["hold_bytes"])

    def fresh(values: list[Any]) -> list[Any]:
        """A private copy for one use, kept alive after it (up to ``hold_bytes`` of them, the oldest
        let go first): no two uses close together share an address, so a cache keyed on data
        pointers sees every input as new (and is caught by the timing checks); a GPU-sized set is
        held only until the next (a stale answer from a pointer-keyed cache is still a wrong answer
        to new values)."""
        with judge_ops():
            copy = fresh_copy(values, device)
        held.append((copy, sum(v.numel() * v.element_size() for v in copy if type(v) is torch.Tensor)))
        while len(held) > 1 and sum(size for _, size in held) > hold_limit:
            held.pop(0)
        return copy

    inline.install()  # the same sources as the compile phase built: the build is found, not redone
    secret_reseed()
    measure.watch_modules("gpu_workers")
    # Before any candidate code: the registrations of the judge's own operators, the native objects
    # mapped so far, and the watch over every forward call (strict track: watch.py).
    operators = OperatorSnapshot()
    mapped_before = executable_mappings()
    guard = install_guard()
    watch = ForwardWatch(device, setup["kernel_source"], enabled=bool(setup.get("watch", False)),
                         own_roots=tuple(writable),
                         allowed_ops=tuple(setup.get("allowed_ops") or ()), exempt=guard.exempt)
    with guard.exempt():  # the profiler's start reads its own configuration, not the candidate's
        watch.start()
    fingerprint = Fingerprint(int(setup.get("fingerprint_seed", 0)))

    def describe(exc: BaseException) -> str:
        with guard.exempt():  # formatting a traceback reads frames
            return short_traceback(exc)

    # 1. import and construct
    try:
        module = exec_source(setup["kernel_source"], "kernelcourt_candidate", "<kernel>")
        # A candidate file that copies the task's size constants (level3's recurrent tasks read
        # batch_size in __init__) gets the scaled ones too, as the task's inputs do.
        apply_constants(module, setup.get("constants"), setup["kernel_source"])
        model_cls = module.ModelNew
        measure.synchronize(device)  # whatever the import queued: nothing is left on the GPU at the pause
    except BaseException as exc:  # noqa: BLE001
        send("error", where="import", build_error=is_build_error(exc), error=describe(exc))
        return
    send.pause("imported")
    patched: set[str] = set(measure.patched_attributes()) | set(operators.changed())

    def build(config: int):
        with guard.exempt():  # torch.manual_seed records a stack (frames) for lazy CUDA seeding
            torch.manual_seed(setup["init_seeds"][config])
        # the second configuration is made while the model is built, as the reference's was (perturb.py)
        seed = setup["init_seeds"][config] if config > 0 else None
        model = construct(lambda: model_cls(*setup["init_inputs"]), seed)
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
        setup.pop("state_dicts", None)  # loaded: the host copies of a task's parameters go now
        measure.synchronize(device)
    except BaseException as exc:  # noqa: BLE001
        send("error", where="construct", build_error=False, error=describe(exc))
        return
    send.pause("built")
    with guard.exempt():
        secret_reseed()
    poisoner = measure.Poisoner(device, int(setup.get("poison_bytes", 1 << 20)))

    # 2. warm-up outside every check (lazy library initialisation is not a hack), on inputs the
    # candidate sees anyway (trial 1's), never on the timing inputs; then no new processes.
    try:
        warm_inputs = fresh(trial_inputs[0])
        with torch.no_grad(), watch.call():
            models[0](*warm_inputs)
        measure.synchronize(device)
    except BaseException as exc:  # noqa: BLE001
        send("error", where="forward", build_error=False, error=describe(exc))
        return
    guard.seal()
    patched |= set(measure.patched_attributes()) | set(operators.changed())
    send.pause("ready", patched=sorted(patched))

    on_device = bool(setup.get("compare_on_device"))
    handed: list[Any] = []  # the judge's clones of the last call's outputs, alive until the parent's go

    def guarded(model, inputs: list[Any], trace: bool) -> dict[str, Any]:
        with judge_ops():  # the judge's own work: every candidate mode, subclass handler and hook off
            poisoner.poison()
            threads_before = measure.thread_count()
            kids_before = measure.child_pids()
            inputs_before = measure.snapshot(inputs)
        tracer = OpTracer() if trace else None
        with torch.no_grad(), watch.call():
            if tracer is not None:
                with tracer:
                    out = model(*inputs)
            else:
                out = model(*inputs)
        with judge_ops():
            measure.synchronize(device)
            leaves = measure.flatten(out)
            with guard.exempt():  # the judge reads its own process's memory (refused to candidate code)
                first, unreadable = copy_at_return(leaves, measure.clone_leaf)
            kinds = []
            for leaf in leaves:  # exact type and real storage
                if type(leaf) is not torch.Tensor:
                    kinds.append(f"{type(leaf).__module__}.{type(leaf).__qualname__}")
                elif leaf.is_meta or leaf.device.type != device.type:
                    kinds.append(f"tensor on {leaf.device}")
                elif not measure.has_storage(leaf):
                    kinds.append("tensor without materialised storage")
                else:
                    kinds.append("tensor")
            kinds += [f"tensor whose memory is not readable ({what})" for what in unreadable]
            mutated = not measure.same_values(measure.snapshot(inputs), inputs_before)
            measure._sleep(float(setup.get("settle_s", 0.02)))
            measure.synchronize(device)
            later = measure.snapshot(leaves)
            changed = not measure.same_values(later, first)
            if on_device:  # compared by the reference child where they are (handover)
                handed[:] = [first]
                outputs = handover.export(first)
            else:
                outputs = measure.to_cpu(first)
        return {
            "outputs": outputs,
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
        if index == 0 and on_device:
            first_answer = list(handed[0])  # the determinism check's: trial 1 again after timing
        if on_device:  # the reference compares at this pause, making its own outputs beside ours
            with judge_ops():
                measure.release_gpu_cache(device)
        send.pause("trial", index=index, **observed)  # guarded() synchronised the device
    patched |= set(measure.patched_attributes())

    # 4. timing: new values in the same buffers every iteration; outputs kept for the parent
    buffers = fresh(rotation_inputs[0])
    model = models[0]

    def watched(*inputs: Any) -> Any:
        with watch.call():
            return model(*inputs)

    try:
        warmup_inputs = fresh(trial_inputs[0])
        send.gpu_alone()
        with torch.no_grad():
            stats = timing.time_callable(watched if watch.enabled else model, buffers, rotation_inputs, device,
                                          budget_s=float(setup["timing_budget_s"]),
                                          max_iters=int(setup.get("max_iters", 1000)),
                                          warmup_inputs=warmup_inputs, fingerprint=fingerprint,
                                          keep=set(setup.get("keep_rotations", range(len(rotation_inputs)))),
                                          on_timed=send.timing_begin, on_busy=send.gpu_busy,
                                          # timed in alternation with its baseline where the parent says
                                          on_round=send.round, round_every=int(setup.get("pair_every") or 0),
                                          **timing_switches(setup))
    except BaseException as exc:  # noqa: BLE001
        send("error", where="timing", build_error=False, error=describe(exc))
        return
    kept = stats.pop("kept_outputs")
    send.pause("timing_end", stats=stats)  # small and at once: the parent's wall clock stops here
    with judge_ops():
        kept_cpu = [measure.to_cpu(k) for k in kept]
        del kept
        measure.synchronize(device)
    send.pause("timing_read")  # copied: the parent lets the GPU go while the large message below travels
    send.pause("timing_outputs", kept_outputs=kept_cpu)
    patched |= set(measure.patched_attributes())
    del buffers, warmup_inputs, kept_cpu  # the timing's: nothing after it reads them

    # 5. after timing: a fresh input, then trial 0 again (determinism, poisoned in between)
    try:
        after = guarded(model, fresh(after_inputs[0]), False)
        after_outputs = list(handed)
        again = guarded(models[setup["trials"][0]["config"]], fresh(trial_inputs[0]), False)
        if on_device:
            with judge_ops():
                again["against"] = handover.export(first_answer)
    except BaseException as exc:  # noqa: BLE001
        send("error", where="after timing", build_error=False, error=describe(exc))
        return
    patched |= set(measure.patched_attributes()) | set(operators.changed())
    with judge_ops():  # the reference fingerprints the timed sets and compares at this pause
        measure.release_gpu_cache(device)
    send.pause("after", after=after, again=again)
    del after_outputs
    with guard.exempt():  # the profiler's records and the process's maps: no candidate state
        watched_report = watch.stop()
        mapped_after = executable_mappings()
        peak = measure.gpu_peak_bytes()  # its own word: informational, never part of a verdict
    send("done", patched=sorted(patched), blocked=guard.violations, watch=watched_report, gpu_peak=peak,
         objects={"before": mapped_before, "after": mapped_after, "own_roots": list(watch.own_roots)})
