"""Task and candidate files in KernelBench's format: static validation and loading.

Validation is static (the ``ast`` module) so the parent never executes task or kernel code;
loading happens only inside sandboxed children.
"""

from __future__ import annotations

import ast
import types
from dataclasses import dataclass
from typing import Any

TASK_REQUIRED = ("Model", "get_inputs", "get_init_inputs")


class TaskError(ValueError):
    """A task file that cannot be used: the message names what is wrong."""


class KernelFileError(ValueError):
    """A candidate file that cannot be used (it gets a verdict, not a crash)."""


@dataclass(frozen=True)
class TaskInfo:
    classes: tuple[str, ...]
    functions: tuple[str, ...]
    profiles: tuple[str, ...]


def _top_level_names(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    classes, functions, assigned = set(), set(), set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            classes.add(node.name)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            functions.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned.add(target.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            assigned.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                assigned.add((alias.asname or alias.name).split(".")[0])
    return classes, functions, assigned


def _parse(source: str, what: str, error: type[ValueError]) -> ast.Module:
    if not isinstance(source, str) or not source.strip():
        raise error(f"the {what} file is empty")
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise error(f"the {what} file is not valid Python: line {exc.lineno}: {exc.msg}") from None


def _profile_keys(tree: ast.Module) -> tuple[str, ...]:
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "PROFILES" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return tuple(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    return ()


def validate_task_source(source: str) -> TaskInfo:
    """Raise TaskError naming every missing piece of a KernelBench task file."""
    tree = _parse(source, "task", TaskError)
    classes, functions, assigned = _top_level_names(tree)
    defined = classes | functions | assigned
    missing = [name for name in TASK_REQUIRED if name not in defined]
    if missing:
        raise TaskError(
            "the task file does not define " + ", ".join(f"`{m}`" for m in missing)
            + " (KernelBench format: class Model(nn.Module), get_inputs(), get_init_inputs())"
        )
    return TaskInfo(tuple(sorted(classes)), tuple(sorted(functions)), _profile_keys(tree))


def validate_kernel_source(source: str) -> None:
    """Raise KernelFileError if the candidate cannot define ModelNew."""
    tree = _parse(source, "kernel", KernelFileError)
    classes, _functions, assigned = _top_level_names(tree)
    if "ModelNew" not in classes and "ModelNew" not in assigned:
        raise KernelFileError("the kernel file does not define `class ModelNew` (KernelBench format)")


def exec_source(source: str, module_name: str, filename: str) -> types.ModuleType:
    """Execute source as a fresh module (children only: this runs the file's code). Its text is put
    in ``linecache`` under ``filename``, as if read from a file: libraries that read a function's
    source (``triton.jit``, ``torch.jit.script``, ``inspect.getsource``) work on it, and tracebacks
    show its lines."""
    import linecache
    import sys

    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module  # dataclasses, pickling and torch.compile look modules up
    # no modification time: linecache.checkcache keeps the entry, there being no file to compare with
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    code = compile(source, filename, "exec")
    exec(code, module.__dict__)  # noqa: S102 - sandboxed child process only
    return module


def apply_profile(module: types.ModuleType, profile: str | None) -> str | None:
    """Overwrite the module's size constants with PROFILES[profile]; return the profile used."""
    profiles = getattr(module, "PROFILES", None)
    if not profiles or profile is None:
        return None
    if profile not in profiles:
        raise TaskError(f"the task has no size profile {profile!r}; it has {sorted(profiles)}")
    values: dict[str, Any] = profiles[profile]
    for key, value in values.items():
        setattr(module, key, value)
    return profile


def load_task_module(source: str, profile: str | None) -> types.ModuleType:
    module = exec_source(source, "kernelcourt_task", "<task>")
    for name in TASK_REQUIRED:
        if not hasattr(module, name):
            raise TaskError(f"the task file does not define `{name}`")
    apply_profile(module, profile)
    return module
