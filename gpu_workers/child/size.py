"""A task's sizes, measured without running it: the elements and bytes of its inputs, outputs and
parameters on the meta device, and a scaled-down set of its module-level size constants that keeps
every tensor under a bound (``--max-elements``: KernelBench's published sizes on a laptop's CPU).

Runs only in a sandboxed child (it executes the task's code). The task file is never edited: the
scaled constants overwrite the module's globals after it is loaded, as a size profile does
(``tasks.apply_profile``), so ``get_inputs()``/``get_init_inputs()`` read them at their next call.
"""

from __future__ import annotations

import ast
import functools
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

# Constants with these names keep their value while any other can still shrink: halving a kernel
# size, a stride or a head count changes what the task computes, not only how much of it.
_STRUCTURAL = ("kernel", "stride", "pad", "dilation", "group", "head", "output_padding", "dim_reduce",
               "reduce_dim", "axis", "top", "k_size", "window", "pool")
_MAX_STEPS = 400


class SizeError(ValueError):
    """No scaling of the task's constants fits the bound (the message says what is left too large)."""


@dataclass
class TaskBytes:
    """What one evaluation's tensors weigh, per kind (elements of the largest tensor, bytes of all)."""

    input_bytes: int = 0
    output_bytes: int = 0
    parameter_bytes: int = 0
    largest: dict[str, int] = field(default_factory=dict)  # kind -> elements of its largest tensor
    how: str = "meta"  # "meta", or "cpu" where the forward has no meta kernel and the task is small
    flops: int | None = None  # one forward's FLOPs (torch's FlopCounterMode, from the shapes alone)
    # the most bytes the forward's own tensors (its intermediates and outputs) held at once: its
    # working set beyond the inputs and weights, which deep networks' activations make far larger
    # than the outputs (None where it could not be followed)
    working_bytes: int | None = None

    @property
    def total_bytes(self) -> int:
        return self.input_bytes + self.output_bytes + self.parameter_bytes

    @property
    def max_elements(self) -> int:
        return max(self.largest.values(), default=0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaskBytes:
        return cls(**{k: data[k] for k in ("input_bytes", "output_bytes", "parameter_bytes", "largest", "how",
                                            "flops", "working_bytes") if k in data})


def _assigned(node: ast.stmt) -> list[str]:
    """The names an assignment binds (tuple targets unpacked), in order."""
    names: list[str] = []

    def take(target: ast.expr) -> None:
        if isinstance(target, ast.Name):
            names.append(target.id)
        elif isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                take(element)

    for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
        take(target)
    return names


def constant_names(source: str) -> list[str]:
    """The names a task file assigns at module level (``a = 4``; ``a, b = 4, 8``; ``n = 2048 * 2``),
    in order: the candidates for its size constants, whatever expression gives their value."""
    names: list[str] = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) or (isinstance(node, ast.AnnAssign) and node.value is not None):
            names += [name for name in dict.fromkeys(_assigned(node)) if name not in names]
    return names


_SIZE_EXPRESSION = (ast.Tuple, ast.List, ast.Name, ast.Constant, ast.BinOp, ast.UnaryOp, ast.Subscript, ast.Slice,
                    ast.expr_context, ast.operator, ast.unaryop)


@functools.lru_cache(maxsize=16)
def _derivations(source: str) -> tuple[tuple[tuple[str, ...], ast.Module], ...]:
    """The module-level assignments that compute a size from earlier module-level names with
    arithmetic and tuples alone (``bias_shape = (out_channels, 1, 1)``, ``input_shape =
    (num_classes,)``, ``dim = batch * 2``): the names each assigns and its statement (a syntax
    tree), in file order. They follow their inputs when constants are scaled, rather than being
    scaled apart (a class count halved in the predictions' shape but not in the targets' range is
    another task)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ()
    seen: set[str] = set()
    found = []
    for node in tree.body:
        if not isinstance(node, ast.Assign | ast.AnnAssign) or node.value is None:
            continue
        names = _assigned(node)
        reads = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        if reads & seen and all(isinstance(n, _SIZE_EXPRESSION) for n in ast.walk(node.value)):
            found.append((tuple(names), ast.Module(body=[node], type_ignores=[])))
        seen.update(names)
    return tuple(found)


def derived_names(source: str) -> set[str]:
    """Names whose value ``_derivations`` computes from others (never scaled on their own)."""
    return {name for names, _ in _derivations(source) for name in names}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def size_constants(module: types.ModuleType, names: list[str]) -> dict[str, int]:
    """The loaded module's integer constants among ``names``, a tuple of integers as one entry per
    element (``input_shape[0]``). Booleans are not sizes."""
    found: dict[str, int] = {}
    for name in names:
        value = getattr(module, name, None)
        if _is_int(value):
            found[name] = int(value)
        elif isinstance(value, tuple) and value and all(_is_int(v) for v in value):
            for index, element in enumerate(value):
                found[f"{name}[{index}]"] = int(element)
    return found


def apply_constants(module: types.ModuleType, constants: dict[str, int] | None, source: str | None = None) -> None:
    """Overwrite the module's integer globals (or tuple elements, ``name[i]``) that a sizing
    changed; names the module does not define as integers are left alone. With the module's
    ``source``, the sizes computed from others (``_derivations``) are computed again from the new
    values."""
    for key, value in (constants or {}).items():
        name, _, index = key.partition("[")
        current = getattr(module, name, None)
        if not index and _is_int(current):
            setattr(module, name, int(value))
        elif index and isinstance(current, tuple):
            position = int(index.rstrip("]"))
            if 0 <= position < len(current) and _is_int(current[position]):
                setattr(module, name, current[:position] + (int(value),) + current[position + 1:])
    if constants and source:
        filename = getattr(module, "__file__", None) or "<task>"  # the file's own name: its frames stay its own
        for _, statement in _derivations(source):
            exec(compile(statement, filename, "exec"), module.__dict__)  # noqa: S102 - arithmetic on its names


def structural(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _STRUCTURAL)


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _weigh(tensors: list[Any]) -> tuple[int, int]:
    return sum(t.numel() * t.element_size() for t in tensors), max((t.numel() for t in tensors), default=0)


def measure(task: types.ModuleType, forward: bool = True, real_limit: int = 1 << 16) -> TaskBytes:
    """Inputs, parameters and (with ``forward``) outputs of ``task`` at its current constants, on the
    meta device: no memory is allocated, so a task of 10 GB is measured in milliseconds. A forward
    with no meta kernel (data-dependent shapes) runs for real on the CPU, but only when every input
    and parameter has at most ``real_limit`` elements; otherwise it raises SizeError."""
    import torch

    torch.manual_seed(0)
    with torch.device("meta"):
        init = list(task.get_init_inputs())
        inputs = list(task.get_inputs())
    try:
        with torch.device("meta"):
            model = task.Model(*init)
    except Exception:  # noqa: BLE001 - a constructor that reads a value (``.item()``) has none on meta
        with _weights_on_meta():
            model = task.Model(*init)
    params = list(model.parameters()) + list(model.buffers())
    in_bytes, in_largest = _weigh(_tensors(inputs))
    p_bytes, p_largest = _weigh(params)
    sizes = TaskBytes(input_bytes=in_bytes, parameter_bytes=p_bytes,
                      largest={"input": in_largest, "parameter": p_largest})
    if not forward:
        return sizes
    try:
        with torch.no_grad():
            out, sizes.flops, sizes.working_bytes = _counted(
                model, [t.to("meta") if isinstance(t, torch.Tensor) else t for t in inputs])
    except Exception as exc:  # noqa: BLE001 - an op without a meta kernel, or a data-dependent shape
        if max(in_largest, p_largest) > real_limit:
            raise SizeError(f"the task's forward does not run on the meta device ({type(exc).__name__}: "
                            f"{str(exc)[:200]}) and its tensors are too large to run it on the CPU") from None
        torch.manual_seed(0)
        with torch.no_grad():
            out, sizes.flops, sizes.working_bytes = _counted(task.Model(*task.get_init_inputs()),
                                                             list(task.get_inputs()))
        sizes.how = "cpu"
    sizes.output_bytes, sizes.largest["output"] = _weigh(_tensors(out))
    return sizes


@contextmanager
def _weights_on_meta() -> Iterator[None]:
    """A constructor run on the CPU with every parameter and buffer moved to the meta device as it is
    registered: what the constructor computes besides its weights (the drop rates of Swin's stages,
    read with ``.item()``, its attention masks) is real and small, and the weights, made with
    ``torch.empty`` and never written before they move, are never touched on the CPU."""
    import torch

    module = torch.nn.Module
    register_parameter, register_buffer = module.register_parameter, module.register_buffer

    def parameter(self: Any, name: str, param: Any) -> None:
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    def buffer(self: Any, name: str, tensor: Any, persistent: bool = True) -> None:
        register_buffer(self, name, tensor.to("meta") if tensor is not None else None, persistent)

    module.register_parameter, module.register_buffer = parameter, buffer
    try:
        yield
    finally:
        module.register_parameter, module.register_buffer = register_parameter, register_buffer


class _LiveBytes:
    """The bytes of the storages a forward's operators make, while any tensor on them lives, and
    their most at once: the forward's working set, counted from the shapes as it runs (on the meta
    device nothing is allocated). A storage is counted once however many views it has, and freed
    with the last of them; what existed before the forward (inputs, weights, their in-place
    updates) is not its own."""

    def __init__(self, model: Any, inputs: list[Any]):
        from torch.utils._python_dispatch import TorchDispatchMode

        tracker = self
        self.before = {self._key(t) for t in _tensors(inputs) + list(model.parameters()) + list(model.buffers())}
        self.live: dict[int, list[int]] = {}  # storage -> [bytes, tensors on it]
        self.now = self.peak = 0

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                out = func(*args, **(kwargs or {}))
                for tensor in _tensors(out):
                    tracker._made(tensor)
                return out

        self.mode = Mode()

    @staticmethod
    def _key(tensor: Any) -> int | None:
        try:
            return int(tensor.untyped_storage()._cdata)
        except Exception:  # noqa: BLE001 - a tensor without a storage of its own
            return None

    def _made(self, tensor: Any) -> None:
        key = self._key(tensor)
        if key is None or key in self.before:
            return
        entry = self.live.get(key)
        if entry is None:
            entry = self.live[key] = [int(tensor.untyped_storage().nbytes()), 0]
            self.now += entry[0]
            self.peak = max(self.peak, self.now)
        entry[1] += 1
        weakref.finalize(tensor, self._gone, key)

    def _gone(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] == 0:
                del self.live[key]
                self.now -= entry[0]


def _counted(model: Any, inputs: list[Any]) -> tuple[Any, int | None, int | None]:
    """The forward's outputs, its FLOPs and its working set (``_LiveBytes``), counted from the shapes
    as it runs: the roofline floor's count and the GPU announcement's working set, made here (outside
    any GPU slot, once per task and bound) rather than by the reference child while it holds the GPU.
    A forward that the counters cannot follow runs again without them."""
    from torch.utils.flop_counter import FlopCounterMode

    try:
        counter, live = FlopCounterMode(display=False), _LiveBytes(model, inputs)
        with counter, live.mode:
            out = model(*inputs)
        return out, int(counter.get_total_flops()), live.peak
    except Exception:  # noqa: BLE001 - the counts are extras; the forward's own failure shows below
        return model(*inputs), None, None


def _measured(task: types.ModuleType) -> TaskBytes:
    """``measure`` with the forward, a failure of the task's own code said as a SizeError."""
    try:
        return measure(task)
    except SizeError:
        raise
    except Exception as exc:  # noqa: BLE001 - task code: a message, not a crash
        raise SizeError(f"the task does not run on the meta device: {type(exc).__name__}: "
                        f"{str(exc)[:300]}") from None


def _try(task: types.ModuleType, values: dict[str, int], forward: bool, source: str | None) -> TaskBytes | None:
    apply_constants(task, values, source)
    try:
        return measure(task, forward)
    except Exception:  # noqa: BLE001 - these constants give no valid task (a shape that no longer fits)
        return None


def shrink(task: types.ModuleType, constants: dict[str, int], max_elements: int,
           source: str | None = None) -> tuple[dict[str, int], TaskBytes]:
    """Halve the task's largest size constant, again and again, until no input, output or parameter
    has more than ``max_elements`` elements. A halving that breaks the task (a shape that no longer
    fits: channels not divisible by groups, a spatial size below the kernel's) or shrinks nothing is
    undone and that constant left alone from then on; structural constants (kernel sizes, strides,
    head counts) are halved only once no other constant can move. Inputs and parameters are brought
    within the bound first without running the forward (a recurrent forward on the meta device
    runs step by step in Python), then the outputs too. With the task's ``source``, sizes computed
    from other constants follow them (``apply_constants``). Returns the constants that changed (name ->
    new value) and the sizes they give; raises SizeError if nothing fits."""
    if max_elements < 1:
        raise SizeError("--max-elements must be at least 1")
    values = dict(constants)
    apply_constants(task, values, source)
    try:
        sizes = measure(task, forward=False)
    except Exception as exc:  # noqa: BLE001 - the task at its own sizes does not build
        raise SizeError(f"the task does not build at its own sizes on the meta device: {type(exc).__name__}: "
                        f"{str(exc)[:300]}") from None
    for forward in (False, True):
        if forward:
            try:
                sizes = measure(task)
            except Exception:  # noqa: BLE001 - the first pass's halvings built the model but broke its forward
                # (a shape constant that follows another one, as bias_shape = (out_channels, 1, 1)
                # does): start again from the task's own sizes, running the forward at every step
                values = dict(constants)
                apply_constants(task, values, source)
                sizes = _measured(task)
        frozen: set[str] = set()
        for _ in range(_MAX_STEPS):
            if sizes.max_elements <= max_elements:
                break
            movable = [n for n, v in values.items() if v > 1 and n not in frozen]
            pool = [n for n in movable if not structural(n)] or movable
            if not pool:
                break
            name = max(pool, key=lambda n: (values[n], n))
            trial = {**values, name: values[name] // 2}
            measured = _try(task, trial, forward, source)
            if measured is None or (measured.max_elements, measured.total_bytes) >= (sizes.max_elements,
                                                                                      sizes.total_bytes):
                frozen.add(name)
                apply_constants(task, values, source)
                continue
            values, sizes = trial, measured
        if sizes.max_elements > max_elements:
            worst = max(sizes.largest, key=lambda k: sizes.largest[k])
            raise SizeError(f"no scaling of the task's size constants keeps every tensor within {max_elements} "
                            f"elements: its largest {worst} still has {sizes.max_elements} "
                            f"(constants now {_changed(constants, values) or 'unchanged'})")
    return _changed(constants, values), sizes


def _changed(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in after.items() if before.get(k) != v}


def role_size(setup: dict[str, Any], send: Any) -> None:
    """The ``size`` role: the task's sizes on the meta device and the constants a bound scales."""
    try:
        sized = size_task(setup["task_source"], setup.get("profile"), setup.get("max_elements"))
    except Exception as exc:  # noqa: BLE001 - task code: a message, not a crash
        send("size_failed", error=f"{type(exc).__name__}: {exc}"[:3000])
        return
    send("sized", **sized)


def size_task(source: str, profile: str | None, max_elements: int | None) -> dict[str, Any]:
    """The sizing a child reports: the constants that change (none without a bound) and the task's
    bytes at them. Loads the task (executing its code)."""
    from ..tasks import load_task_module

    task = load_task_module(source, profile)
    derived = derived_names(source)
    constants = size_constants(task, [n for n in constant_names(source) if n not in derived])
    if max_elements:
        changed, sizes = shrink(task, constants, int(max_elements), source)
    else:
        sizes, changed = _measured(task), {}
    return {"constants": changed, "bytes": sizes.to_dict()}
