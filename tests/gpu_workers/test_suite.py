"""The built-in "arena" suite: task files, manifest, reference kernels and the checker.

Fast tests read and run the task files on the CPU profile and inspect the kernel files without
compiling them; one slow test compiles one C++ kernel and checks it against its task.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gpu_workers.suite import (
    KERNELS_DIR,
    MANIFEST_PATH,
    SUITE_NAME,
    TASKS_DIR,
    SuiteTask,
    get_task,
    list_tasks,
)
from gpu_workers.suite.check import check_task, load_source_module

TASKS = list_tasks()
TASK_IDS = [t.name for t in TASKS]
KERNEL_FILES = [(t, dev) for t in TASKS for dev in ("cpu", "cuda")]
KERNEL_IDS = [f"{t.name}_{dev}" for t, dev in KERNEL_FILES]


def _kernel_path(task: SuiteTask, device: str) -> Path:
    return task.cpu_kernel_path if device == "cpu" else task.cuda_kernel_path


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert len(found) == 1, f"expected one class {name}"
    return found[0]


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef:
    found = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert len(found) == 1, f"expected one method {cls.name}.{name}"
    return found[0]


def _dotted(node: ast.AST) -> str:
    """'torch.nn.functional.gelu' for an attribute chain rooted at a name; '' otherwise."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    parts.append(node.id)
    return ".".join(reversed(parts))


# --- the package and its manifest -------------------------------------------------------------


def test_suite_lists_at_least_14_tasks_over_three_levels_sorted_by_level_then_name():
    assert SUITE_NAME == "arena"
    assert len(TASKS) >= 14
    assert [(t.level, t.name) for t in TASKS] == sorted((t.level, t.name) for t in TASKS)
    assert {t.level for t in TASKS} == {1, 2, 3}
    assert len({t.name for t in TASKS}) == len(TASKS)


def test_every_task_has_ops_a_description_and_readable_sources():
    for task in TASKS:
        assert task.ops and all(isinstance(op, str) and op for op in task.ops), task.name
        assert len(task.description) > 20, task.name
        assert "class Model" in task.task_source
        assert "class ModelNew" in task.cpu_kernel_source
        assert "class ModelNew" in task.cuda_kernel_source
        assert task.kernel_source("cpu") == task.cpu_kernel_source
        assert task.kernel_source("cuda") == task.cuda_kernel_source
    with pytest.raises(ValueError):
        TASKS[0].kernel_source("tpu")


def test_get_task_returns_the_task_and_names_the_known_tasks_when_missing():
    assert get_task("softmax").name == "softmax"
    assert get_task("mlp_block").level == 3
    with pytest.raises(KeyError) as excinfo:
        get_task("no_such_task")
    message = str(excinfo.value)
    assert "no_such_task" in message
    assert "softmax" in message and "attention_head" in message


def test_manifest_entries_match_the_files_both_ways():
    names = set(json.loads(MANIFEST_PATH.read_text())["tasks"])
    assert {p.stem for p in TASKS_DIR.glob("*.py")} == names
    assert {p.name[: -len("_cpu.py")] for p in KERNELS_DIR.glob("*_cpu.py")} == names
    assert {p.name[: -len("_cuda.py")] for p in KERNELS_DIR.glob("*_cuda.py")} == names
    assert {p.name for p in KERNELS_DIR.glob("*.py")} == {
        f"{n}_{d}.py" for n in names for d in ("cpu", "cuda")
    }


def test_suite_module_imports_without_torch():
    # Loaded on its own (not through gpu_workers/__init__, which is not this module's to judge).
    path = Path(__file__).resolve().parents[2] / "gpu_workers" / "suite" / "__init__.py"
    code = textwrap.dedent(
        f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("arena_suite_alone", {str(path)!r})
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        assert len(module.list_tasks()) >= 14
        print("torch" in sys.modules)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- task files -------------------------------------------------------------------------------


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_task_file_defines_the_kernelbench_contract_and_both_profiles(task):
    tree = ast.parse(task.task_source)
    top_level = {n.name for n in tree.body if isinstance(n, ast.ClassDef | ast.FunctionDef)}
    assert {"Model", "get_inputs", "get_init_inputs"} <= top_level
    module = load_source_module(task.task_source, f"test_task_{task.name}", str(task.task_path))
    profiles = module.PROFILES
    assert set(profiles) == {"cpu", "cuda"}
    assert profiles["cpu"].keys() == profiles["cuda"].keys() and profiles["cpu"]
    for key, value in profiles["cuda"].items():
        # the file's own constants are the GPU sizes, for tools that ignore PROFILES
        assert getattr(module, key) == value, (
            f"{task.name}: {key} = {getattr(module, key)} != cuda profile {value}"
        )
    assert profiles["cpu"] != profiles["cuda"]


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_get_inputs_reads_the_profile_at_call_time_and_the_cuda_profile_fits_an_h200(task):
    sizes = {}
    for profile in ("cpu", "cuda"):
        module = load_source_module(
            task.task_source, f"test_task_{task.name}_{profile}", str(task.task_path), profile
        )
        with torch.device("meta"):  # shapes only: no memory for the GPU sizes
            torch.manual_seed(0)
            inputs = module.get_inputs()
            model = module.Model(*module.get_init_inputs())
        tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
        assert tensors and all(x.dtype == torch.float32 for x in tensors)
        weight_bytes = sum(p.numel() * 4 for p in model.parameters())
        sizes[profile] = sum(x.numel() * 4 for x in tensors) + weight_bytes
    assert sizes["cpu"] < sizes["cuda"]
    assert sizes["cpu"] <= 24 * 2**20
    assert 16 * 2**20 <= sizes["cuda"] <= 512 * 2**20


@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_cpu_profile_reference_runs_and_gives_a_finite_non_constant_output(task):
    module = load_source_module(task.task_source, f"test_task_{task.name}_run", str(task.task_path), "cpu")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).eval()
    torch.manual_seed(1)
    inputs = module.get_inputs()
    with torch.no_grad():
        out = model(*inputs)
        again = model(*inputs)
    assert type(out) is torch.Tensor and out.dtype == torch.float32
    assert out.numel() >= 65536
    assert torch.isfinite(out).all()
    assert out.std().item() > 1e-3 * out.abs().mean().item() > 0
    assert torch.equal(out, again)  # no randomness inside forward


def test_tasks_with_weights_use_non_default_values_for_norm_affine_maps():
    for name in ("layernorm", "add_layernorm", "rmsnorm"):
        task = get_task(name)
        module = load_source_module(task.task_source, f"test_task_{name}_w", str(task.task_path), "cpu")
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        weight = model.state_dict()[next(k for k in model.state_dict() if k.endswith("weight"))]
        assert (weight - 1.0).abs().max().item() > 0.05, name


# --- kernel files (inspected, not compiled) -----------------------------------------------------


@pytest.mark.parametrize(("task", "device"), KERNEL_FILES, ids=KERNEL_IDS)
def test_kernel_file_defines_modelnew_and_builds_with_load_inline(task, device):
    tree = ast.parse(_kernel_path(task, device).read_text())
    model_new = _class(tree, "ModelNew")
    _method(model_new, "forward")
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _dotted(n.func).endswith("load_inline")]
    assert len(calls) == 1
    keywords = {k.arg: k.value for k in calls[0].keywords}
    assert (
        isinstance(keywords["name"], ast.Constant) and keywords["name"].value == f"arena_{task.name}_{device}"
    )
    assert isinstance(keywords["verbose"], ast.Constant) and keywords["verbose"].value is False
    assert "functions" in keywords and "cpp_sources" in keywords
    if device == "cuda":
        assert "cuda_sources" in keywords
    else:
        assert "cuda_sources" not in keywords


@pytest.mark.parametrize(("task", "device"), KERNEL_FILES, ids=KERNEL_IDS)
def test_kernel_forward_only_calls_the_extension(task, device):
    tree = ast.parse(_kernel_path(task, device).read_text())
    forward = _method(_class(tree, "ModelNew"), "forward")
    assert not [n for n in ast.walk(forward) if isinstance(n, ast.BinOp | ast.UnaryOp | ast.AugAssign)]
    ext_calls = 0
    for node in ast.walk(forward):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        if name.startswith("_ext."):
            ext_calls += 1
            continue
        assert re.fullmatch(r"torch\.empty\w*", name), (
            f"{task.name}_{device}: forward calls {name or ast.dump(node.func)}"
        )
    assert ext_calls == 1


def _init_signature(cls: ast.ClassDef) -> list[tuple[str, str | None]]:
    init = _method(cls, "__init__")
    args = init.args.args[1:]
    defaults = [None] * (len(args) - len(init.args.defaults)) + [ast.unparse(d) for d in init.args.defaults]
    return [(a.arg, d) for a, d in zip(args, defaults)]


def _module_attributes(cls: ast.ClassDef) -> set[str]:
    """self.<name> assigned an nn.<Module>(...) or nn.Parameter(...) in __init__."""
    names = set()
    for node in ast.walk(_method(cls, "__init__")):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _dotted(node.value.func).startswith("nn."):
                names |= {_dotted(t) for t in node.targets}
    return names


@pytest.mark.parametrize(("task", "device"), KERNEL_FILES, ids=KERNEL_IDS)
def test_modelnew_has_models_constructor_and_parameter_names(task, device):
    model = _class(ast.parse(task.task_source), "Model")
    model_new = _class(ast.parse(_kernel_path(task, device).read_text()), "ModelNew")
    assert _init_signature(model_new) == _init_signature(model)
    assert _module_attributes(model_new) == _module_attributes(model)


ALLOWED_QUALIFIED = {
    "torch::Tensor",
    "torch::empty",
    "torch::empty_like",
    "torch::kFloat32",
    "at::parallel_for",
    "at::cuda::getCurrentCUDAStream",
    "at::cuda::CUDAGuard",
}
ALLOWED_METHODS = {
    "contiguous",
    "data_ptr",
    "size",
    "sizes",
    "numel",
    "dim",
    "options",
    "device",
    "scalar_type",
    "is_cuda",
    "is_cpu",
    "vec",
    "back",
}


def _native_source(path: Path) -> str:
    tree = ast.parse(path.read_text())
    texts = [
        n.value.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Constant)
        and isinstance(n.value.value, str)
        and any(isinstance(t, ast.Name) and t.id.endswith("_source") for t in n.targets)
    ]
    assert texts, f"{path.name}: no *_source string"
    return "\n".join(texts)


@pytest.mark.parametrize(("task", "device"), KERNEL_FILES, ids=KERNEL_IDS)
def test_native_code_uses_no_aten_compute_and_checks_its_inputs(task, device):
    code = _native_source(_kernel_path(task, device))
    code = re.sub(r"//[^\n]*|/\*.*?\*/", "", code, flags=re.S)  # comments may say anything
    qualified = set(re.findall(r"\b(?:torch|at|c10)::[A-Za-z_][\w:]*", code))
    assert qualified <= ALLOWED_QUALIFIED, f"{task.name}_{device}: {sorted(qualified - ALLOWED_QUALIFIED)}"
    methods = set(re.findall(r"[\w)\]]\s*(?:\.|->)\s*([A-Za-z_]\w*)\s*(?:<[^<>()]*>)?\s*\(", code))
    assert methods <= ALLOWED_METHODS, f"{task.name}_{device}: {sorted(methods - ALLOWED_METHODS)}"
    assert "TORCH_CHECK" in code
    # fp32 only (family 13), deterministic: no reduced precision types, tensor-core paths or RNG
    for banned in (
        "__half",
        "half2",
        "bfloat16",
        "wmma",
        "mma.sync",
        "tf32",
        "fast_math",
        "fast-math",
        "curand",
        "rand(",
    ):
        assert banned not in code.lower(), f"{task.name}_{device}: {banned}"
    if device == "cuda":
        assert "__global__" in code
        assert "getCurrentCUDAStream" in code
        assert "cudaGetLastError" in code
        assert "is_cuda()" in code


# --- the checker itself (pure-Python kernels, no compile) ------------------------------------------

_PY_GELU = """
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.gelu(x){suffix}
"""


def test_checker_passes_a_correct_kernel_and_reports_timings():
    row = check_task(
        get_task("gelu"), "cpu", "cpu", trials=2, repeats=2, kernel_source=_PY_GELU.format(suffix="")
    )
    assert row.ok, row.detail
    assert row.max_abs_err == 0.0
    assert row.ref_ms is not None and row.kernel_ms is not None


def test_checker_fails_a_kernel_that_is_slightly_wrong():
    row = check_task(
        get_task("gelu"), "cpu", "cpu", trials=2, repeats=1, kernel_source=_PY_GELU.format(suffix=" * 1.001")
    )
    assert not row.ok
    assert "mismatch" in row.detail


def test_checker_fails_a_kernel_whose_parameter_names_differ():
    source = """
import torch.nn as nn

class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return self.fc(x).relu()
"""
    row = check_task(get_task("linear_bias_relu"), "cpu", "cpu", trials=1, repeats=1, kernel_source=source)
    assert not row.ok
    assert "parameter names" in row.detail


def test_checker_applies_size_overrides_to_the_task():
    source = """
import torch.nn as nn
import torch.nn.functional as F

class ModelNew(nn.Module):
    def forward(self, x):
        if x.shape != (256, 7):
            raise AssertionError(f"got shape {tuple(x.shape)}")
        return F.gelu(x)
"""
    row = check_task(
        get_task("gelu"), "cpu", "cpu", trials=1, repeats=1, overrides={"dim": 7}, kernel_source=source
    )
    assert row.ok, row.detail
    with pytest.raises(AssertionError, match=r"got shape \(256, 1024\)"):
        check_task(get_task("gelu"), "cpu", "cpu", trials=1, repeats=1, kernel_source=source)


# --- real builds ---------------------------------------------------------------------------------


def _extensions_dir(cache_dir: Path) -> str:
    import os

    return os.environ.get("TORCH_EXTENSIONS_DIR") or str(cache_dir / "torch_extensions_suite")


@pytest.mark.slow
def test_gelu_cpu_reference_kernel_compiles_and_matches_its_task(kernelcourt_cache_dir, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", _extensions_dir(kernelcourt_cache_dir))
    row = check_task(get_task("gelu"), "cpu", "cpu", trials=3, repeats=2)
    assert row.ok, row.detail
    assert row.max_abs_err is not None and row.max_abs_err <= 1e-5


# Sizes that are no multiple of any tile or block, for the bounds checks of every kernel.
ODD_SIZES = {
    "batch_size": 67,
    "dim": 1000,
    "M": 257,
    "K": 129,
    "N": 95,
    "rows": 100,
    "cols": 77,
    "reduce_dim": 37,
    "inner_dim": 1001,
    "channels": 3,
    "length": 513,
    "in_features": 129,
    "out_features": 95,
    "hidden": 300,
    "seq_len": 77,
    "head_dim": 40,
}


@pytest.fixture(scope="module")
def cuda_suite_built(kernelcourt_cache_dir):
    """Every CUDA reference kernel built once, in parallel processes (a cold build is minutes)."""
    import os

    from gpu_workers.suite.check import prebuild

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCH_EXTENSIONS_DIR", _extensions_dir(kernelcourt_cache_dir))
        prebuild(TASKS, "cuda", jobs=max(1, min(len(TASKS), os.cpu_count() or 1)))
        yield


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS, ids=TASK_IDS)
def test_cuda_reference_kernel_matches_its_task_at_gpu_and_odd_sizes(task, cuda_suite_built):
    row = check_task(task, "cuda", "cuda", trials=3, repeats=2)
    assert row.ok, row.detail
    odd = check_task(task, "cuda", "cpu", trials=2, repeats=1, overrides=ODD_SIZES)
    assert odd.ok, odd.detail
