"""Shared fixtures for the evaluator's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
HACKS = Path(__file__).resolve().parent / "hacks"


def _kernelbench_dir() -> Path:
    """KernelBench's published tasks: ``shared/kernelbench`` inside the checkout where it is there (the
    GPU machine's copy: only the checkout travels), else ``../shared/kernelbench`` beside it."""
    inside = REPO_ROOT / "shared" / "kernelbench"
    return inside if inside.is_dir() else REPO_ROOT.parent / "shared" / "kernelbench"


@pytest.fixture(scope="session")
def bench_module():
    """``load(name)``: the script ``bench/<name>.py`` imported as a module (bench/ is no package)."""
    import importlib.util

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture(scope="session", autouse=True)
def kernelcourt_cache_dir():
    """One persistent cache (built extensions, baseline timings) for every test and every run.

    <repo>/.cache/ is gitignored; an explicit KERNELCOURT_CACHE_DIR in the environment wins.
    """
    import os

    with pytest.MonkeyPatch.context() as patch:
        path = Path(os.environ.get("KERNELCOURT_CACHE_DIR") or REPO_ROOT / ".cache" / "kernelcourt")
        path.mkdir(parents=True, exist_ok=True)
        patch.setenv("KERNELCOURT_CACHE_DIR", str(path))
        yield path


@pytest.fixture(autouse=True)
def fresh_settings():
    """Each test is a fresh process as far as the settings go: read from the environment (as the test
    set it) on their first use in the test, not kept from the one before."""
    from gpu_workers import settings

    settings.current.cache_clear()
    yield
    settings.current.cache_clear()


@pytest.fixture(scope="session")
def hacks_dir() -> Path:
    return HACKS


@pytest.fixture(scope="session")
def kernelbench_root() -> Path:
    """The KernelBench folder, whether it is there or not: for the GPU tests, which fail without it."""
    return _kernelbench_dir()


@pytest.fixture(scope="session")
def kernelbench(kernelbench_root: Path) -> Path:
    """The KernelBench folder; a test that asks for it is skipped where it is not there."""
    if not kernelbench_root.is_dir():
        pytest.skip(f"{kernelbench_root} is not here")
    return kernelbench_root
