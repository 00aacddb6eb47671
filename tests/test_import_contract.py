"""The import borders, read from the source (every import statement, function-level ones included,
relative ones resolved):

- no import circle between the modules of gpu_workers/;
- gpu_workers/ never imports Django, the web app, the agent or training; agent/ and training/ never
  import Django or the web app;
- what runs in an untrusted child (gpu_workers/child/ and everything it imports) stays on the child's
  side of the border: never the pools (workers/), the pipeline (evaluator, pipeline/), the command line, or the
  parent's process and compile code.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Only these may be imported by a module of gpu_workers/child/ (the room itself aside).
CHILD_MAY_IMPORT = {
    "gpu_workers.settings",
    "gpu_workers.sandbox.wire",
    "gpu_workers.build.baton",
    "gpu_workers.build.inline",
    "gpu_workers.build.light",
    "gpu_workers.build.split",
    "gpu_workers.build.toolchain",
    "gpu_workers.tasks",
}
PARENT_ONLY = ("gpu_workers.workers", "gpu_workers.evaluator", "gpu_workers.pipeline", "gpu_workers.cli")
WEB = ("django", "webapp", "channels", "ninja", "celery")


def module_names(package: str) -> dict[str, Path]:
    """Every module of a top-level package, by dotted name (a package by its own name)."""
    names = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name a ``from`` import refers to: ``level`` dots, seen from ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _known(name: str, known: set[str]) -> str:
    """The longest prefix of ``name`` that is one of ``known`` (else ``name`` itself: a third-party
    module)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return name


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """Every module that ``module`` imports anywhere in its source (top level, functions, classes)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(_known(alias.name, known) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                child = f"{base}.{alias.name}"
                found.add(child if child in known else _known(base, known))
    found.discard(module)
    return found


def import_graph(packages: Iterable[str]) -> dict[str, set[str]]:
    modules: dict[str, Path] = {}
    for package in packages:
        modules.update(module_names(package))
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected group of more than one module (or a module that
    imports itself), sorted. Tarjan's algorithm, iterative so deep graphs need no recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1 or node in graph.get(node, ()):
                    cycles.append(sorted(group))
    return sorted(cycles)


def reachable(graph: dict[str, set[str]], starts: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        todo.extend(graph.get(node, ()))
    return seen


def _top(name: str) -> str:
    return name.split(".")[0]


def test_the_cycle_finder_finds_a_circle_in_a_small_graph_and_none_in_a_tree():
    # given a three-module circle with a module hanging off it, a self-import, and a tree
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a", "x"}, "d": {"a"}, "x": set()}
    itself = {"s": {"s"}, "t": {"s"}}
    tree = {"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"torch"}}
    # when / then
    assert find_cycles(circle) == [["a", "b", "c"]]
    assert find_cycles(itself) == [["s"]]
    assert find_cycles(tree) == []


def test_relative_imports_resolve_from_a_module_and_from_a_package():
    assert resolve("gpu_workers.child.main", False, 2, "sandbox") == "gpu_workers.sandbox"
    assert resolve("gpu_workers.child.main", False, 1, None) == "gpu_workers.child"
    assert resolve("gpu_workers.child", True, 1, "main") == "gpu_workers.child.main"
    assert resolve("gpu_workers.evaluator", False, 0, "torch.nn") == "torch.nn"


def test_the_scanner_sees_function_level_and_relative_imports(tmp_path):
    # given a module that imports a sibling inside a function, relatively
    source = tmp_path / "main.py"
    source.write_text("import os\n\ndef f():\n    from ..sandbox import wire\n    from . import guard\n")
    known = {"gpu_workers.child.main", "gpu_workers.child.guard", "gpu_workers.sandbox", "gpu_workers.sandbox.wire"}
    # when
    found = imports_of("gpu_workers.child.main", source, known)
    # then
    assert found == {"os", "gpu_workers.sandbox.wire", "gpu_workers.child.guard"}


def test_gpu_workers_has_no_import_circle():
    graph = import_graph(["gpu_workers"])
    assert len(graph) > 40  # the scan saw the package's modules
    assert find_cycles(graph) == []


def test_gpu_workers_never_imports_the_web_app_the_agent_or_training():
    graph = import_graph(["gpu_workers"])
    offending = {(module, target) for module, targets in graph.items() for target in targets
                 if _top(target) in WEB + ("agent", "training", "transformers", "httpx")}
    assert offending == set()


def test_agent_and_training_never_import_django_or_the_web_app():
    graph = import_graph(["agent", "training"])
    offending = {(module, target) for module, targets in graph.items() for target in targets
                 if _top(target) in WEB}
    assert offending == set()


def test_the_child_imports_only_its_own_room_and_the_child_side_modules():
    graph = import_graph(["gpu_workers"])
    child_modules = [m for m in graph if m == "gpu_workers.child" or m.startswith("gpu_workers.child.")]
    assert "gpu_workers.child.main" in child_modules
    direct = {(module, target) for module in child_modules for target in graph[module]
              if _top(target) == "gpu_workers" and not target.startswith("gpu_workers.child")
              and target not in CHILD_MAY_IMPORT}
    assert direct == set()


def test_nothing_the_child_imports_reaches_the_parent_only_rooms():
    # given everything reachable from the child's modules through our own imports
    graph = import_graph(["gpu_workers"])
    ours = {m: {t for t in targets if t in graph} for m, targets in graph.items()}
    reached = reachable(ours, [m for m in graph if m.startswith("gpu_workers.child")])
    # then: no pool, pipeline or command line, nor the parent's process and compile code
    assert {m for m in reached if m.startswith(PARENT_ONLY)} == set()
    assert {m for m in reached if _top(m) == "gpu_workers"} <= (
        CHILD_MAY_IMPORT | {m for m in graph if m.startswith("gpu_workers.child")})


def test_the_modules_a_child_preloads_are_on_its_side_of_the_border():
    from gpu_workers.child import main

    preloaded = {f"gpu_workers.{name}" for names in main.PRELOAD.values() for name in names}
    assert preloaded
    assert {m for m in preloaded if not m.startswith("gpu_workers.child.") and m not in CHILD_MAY_IMPORT} == set()


def test_the_top_of_gpu_workers_holds_at_most_twelve_modules():
    top = sorted(p.name for p in (ROOT / "gpu_workers").glob("*.py"))
    assert len(top) <= 12, top


_BLOCKER = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{{name}} is not installed on a bare GPU node")
        return None
sys.meta_path.insert(0, Blocker())
"""
BARE_NODE_LACKS = ("django", "webapp", "agent", "training", "transformers", "httpx", "ray", "channels", "celery",
                   "ninja", "redis", "psycopg")


def _bare_node(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run([sys.executable, "-c", _BLOCKER.format(blocked=BARE_NODE_LACKS) + code], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_blocker_really_blocks():
    out = _bare_node("import django\n")
    assert out.returncode == 1
    assert "django is not installed on a bare GPU node" in out.stderr


def test_every_gpu_workers_module_imports_on_a_node_with_torch_alone():
    # given every module of the evaluator but the suite's task and kernel files (data, imported by a child)
    # and __main__ (the command line: the next test runs it)
    names = sorted(m for m in module_names("gpu_workers") if m != "gpu_workers.__main__"
                   and not m.startswith(("gpu_workers.suite.tasks", "gpu_workers.suite.kernels")))
    # when each is imported with the web, agent, training and Ray packages missing
    out = _bare_node(f"import importlib\nfor name in {names!r}:\n    importlib.import_module(name)\n"
                     "from gpu_workers import EvalRequest, EvalResult, Finding, evaluate, source_hash\n"
                     f"print('imported', {len(names)})\n")
    # then
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["imported", str(len(names))]


def test_the_evaluator_cli_runs_on_a_node_with_torch_alone():
    out = _bare_node("import runpy\nsys.argv = ['gpu_workers', '--help']\n"
                     "runpy.run_module('gpu_workers', run_name='__main__')\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m gpu_workers")
