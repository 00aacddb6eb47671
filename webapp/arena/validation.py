"""Static checks of task and kernel files before they are stored (``ast`` only; nothing is run)."""

from __future__ import annotations

import ast

TASK_REQUIRED = ("Model", "get_inputs", "get_init_inputs")


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _parse(source: str, what: str) -> tuple[ast.Module | None, list[str]]:
    if not source or not source.strip():
        return None, [f"the {what} file is empty"]
    try:
        return ast.parse(source), []
    except SyntaxError as exc:
        return None, [f"the {what} file is not valid Python: {exc.msg} (line {exc.lineno})"]
    except ValueError as exc:  # e.g. NUL bytes
        return None, [f"the {what} file is not valid Python: {exc}"]


def task_source_errors(source: str) -> list[str]:
    """Why a task file is not a KernelBench task (Model, get_inputs, get_init_inputs); [] if it is."""
    tree, errors = _parse(source, "task")
    if tree is None:
        return errors
    names = _top_level_names(tree)
    missing = [n for n in TASK_REQUIRED if n not in names]
    return [f"the task file does not define {', '.join(missing)}"] if missing else []


def kernel_source_errors(source: str) -> list[str]:
    """Why a kernel file cannot be evaluated at all (no ModelNew, not Python); [] if it can.

    A kernel whose C++/CUDA does not compile is still stored: that is the evaluator's verdict.
    """
    tree, errors = _parse(source, "kernel")
    if tree is None:
        return errors
    return [] if "ModelNew" in _top_level_names(tree) else ["the kernel file does not define ModelNew"]
