"""The web app's borders, as an import contract: an AST scan of every import, function-level ones included.

- ``webapp.arena`` never imports ``webapp.review`` (review plugs itself in through ``webapp.arena.hooks``);
- reads never run evaluations: no ``selectors`` module imports the evaluator's entry points, the job
  plumbing or a Celery task, nor calls ``evaluate``;
- ``webapp.core`` (the shared plumbing) imports no app of the project.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WEBAPP = ROOT / "webapp"
# what running an evaluation or a job takes; a read needs none of it
EVALUATION_ENTRY_POINTS = {"evaluate", "EvalRequest", "shared_ray_pool", "evaluation_run", "job_run", "job_enqueue"}
EVALUATION_MODULES = ("gpu_workers.evaluator", "gpu_workers.pipeline", "gpu_workers.workers.pool", "webapp.core.jobs", "webapp.core.runner")
APPS = ("webapp.accounts", "webapp.arena", "webapp.review", "webapp.rollouts", "webapp.training_runs")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, module: str, *, is_package: bool = False) -> list[tuple[str, set[str], int]]:
    """(imported module, names taken from it, line) for every import anywhere in ``source``."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(alias.name, set(), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = {alias.name for alias in node.names}
            found.append((base, names, node.lineno))
            found += [(f"{base}.{name}", set(), node.lineno) for name in names]  # `from pkg import module`
    return found


def calls_of(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def _sources(pattern: str) -> list[tuple[Path, str]]:
    return [(p, p.read_text()) for p in sorted(WEBAPP.glob(pattern)) if "migrations" not in p.parts]


def _within(imported: str, package: str) -> bool:
    return imported == package or imported.startswith(package + ".")


def test_the_scan_sees_function_level_and_relative_imports():
    source = "def f():\n    from ..review import services\n    import webapp.review.selectors as s\n"

    found = imports_of(source, "webapp.arena.views")

    assert ("webapp.review", {"services"}, 2) in found
    assert ("webapp.review.services", set(), 2) in found
    assert ("webapp.review.selectors", set(), 3) in found


def test_arena_never_imports_review():
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for path, source in _sources("arena/**/*.py")
        for imported, _, line in imports_of(source, module_name(path), is_package=path.name == "__init__.py")
        if _within(imported, "webapp.review")
    ]
    assert offending == []


def test_reads_never_run_evaluations():
    selectors = _sources("*/selectors.py")
    offending = []
    for path, source in selectors:
        for imported, names, line in imports_of(source, module_name(path)):
            taken = names & EVALUATION_ENTRY_POINTS
            if taken or any(_within(imported, m) for m in EVALUATION_MODULES) or imported.endswith(".tasks"):
                offending.append(f"{path.relative_to(ROOT)}:{line} imports {imported} {sorted(taken)}")
        offending += [f"{path.relative_to(ROOT)} calls {name}()" for name in calls_of(source) & {"evaluate"}]
    assert len(selectors) == 5  # every app's reads are scanned
    assert offending == []


def test_core_imports_no_app():
    offending = [
        f"{path.relative_to(ROOT)}:{line} imports {imported}"
        for path, source in _sources("core/**/*.py")
        for imported, _, line in imports_of(source, module_name(path))
        if any(_within(imported, app) for app in APPS)
    ]
    assert offending == []


@pytest.mark.parametrize(
    "source, expected",
    [
        ("from gpu_workers import evaluate\n", ["imports gpu_workers ['evaluate']"]),
        ("def f(r):\n    return r.evaluate()\n", ["calls evaluate()"]),
    ],
)
def test_the_read_rule_catches_an_evaluation(source, expected):
    found = [f"imports {m} {sorted(n & EVALUATION_ENTRY_POINTS)}" for m, n, _ in imports_of(source, "webapp.x.selectors")
             if n & EVALUATION_ENTRY_POINTS]  # fmt: skip
    found += [f"calls {n}()" for n in calls_of(source) & {"evaluate"}]
    assert found == expected
