"""Fixtures of the web app's tests: model factories (plain functions, no mocks) and a known leaderboard."""

from __future__ import annotations

import itertools
import os
import shutil
from pathlib import Path

import pytest

from tests.webapp.requires import service_missing
from webapp.accounts.services import api_token_create
from webapp.arena.models import Evaluation, Hardware, Kernel, Submitter, Task

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

TASK_SOURCE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
"""

KERNEL_SOURCE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.clamp_min(0.0)  # variant {n}
"""

_counter = itertools.count(1)


def kernel_source(n: int | None = None) -> str:
    return KERNEL_SOURCE.replace("{n}", str(n if n is not None else next(_counter)))


@pytest.fixture
def make_task():
    def make(
        *,
        name: str | None = None,
        suite: str = "arena",
        level: int | None = 1,
        source: str = TASK_SOURCE,
        ops: list | None = None,
    ) -> Task:
        from webapp.arena.services import source_hash

        return Task.objects.create(
            suite=suite,
            level=level,
            name=name or f"task_{next(_counter)}",
            source=source,
            source_hash=source_hash(source),
            ops=ops or ["relu"],
        )

    return make


@pytest.fixture
def make_submitter():
    def make(*, name: str | None = None, kind: str = "model") -> Submitter:
        return Submitter.objects.create(name=name or f"submitter_{next(_counter)}", kind=kind)

    return make


@pytest.fixture
def make_hardware():
    def make(*, key: str = "cpu:test|torch-2.13.0|cuda-none") -> Hardware:
        return Hardware.objects.get_or_create(
            key=key, defaults={"name": "test cpu", "torch": "2.13.0", "cuda": "none"}
        )[0]

    return make


@pytest.fixture
def make_kernel(make_task, make_submitter):
    def make(
        *,
        task: Task | None = None,
        submitter: Submitter | None = None,
        source: str | None = None,
        origin: str = "upload",
    ) -> Kernel:
        from webapp.arena.services import source_hash

        source = source or kernel_source()
        return Kernel.objects.create(
            task=task or make_task(),
            submitter=submitter or make_submitter(),
            source=source,
            source_hash=source_hash(source),
            origin=origin,
        )

    return make


SILU_OPEN = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)
"""


@pytest.fixture
def make_silu_kernel(make_task, make_kernel):
    """The suite's silu task and an honest open-track kernel for it: a real evaluation, passed in seconds."""

    def make() -> Kernel:
        task_source = (ROOT / "gpu_workers/suite/tasks/silu.py").read_text()
        return make_kernel(task=make_task(name="silu", source=task_source), source=SILU_OPEN)

    return make


@pytest.fixture
def make_evaluation(make_kernel, make_hardware):
    def make(
        *,
        kernel: Kernel | None = None,
        status: str = "passed",
        track: str = "strict",
        hardware: Hardware | None | bool = True,
        eager: float | None = None,
        compile: float | None = None,
        findings: list | None = None,
    ) -> Evaluation:
        if hardware is True:
            hardware = make_hardware()
        passed = status == "passed"
        return Evaluation.objects.create(
            kernel=kernel or make_kernel(),
            track=track,
            hardware=hardware or None,
            status=status,
            correct=passed,
            speedup_eager=eager,
            speedup_compile=compile,
            findings=findings or [],
            needs_review=any(f.get("severity") == "review" for f in findings or []),
            timings_ms={"kernel": 1.0, "eager": eager or 1.0, "compile": compile},
        )

    return make


@pytest.fixture
def api_token(django_user_model):
    user = django_user_model.objects.create_user(username="alice", password="x")
    _, raw = api_token_create(user=user, name="tests")
    return raw


@pytest.fixture
def staff_token(django_user_model):
    user = django_user_model.objects.create_user(username="root", password="x", is_staff=True)
    _, raw = api_token_create(user=user, name="staff")
    return raw


@pytest.fixture
def known_leaderboard(make_task, make_submitter, make_kernel, make_evaluation, make_hardware):
    """Two submitters on four tasks with hand-picked speedups (see test_leaderboard.py for the sums).

    alpha: t1 passed 2.0×/0.5× and a tie 2.0×/3.0× (the earlier wins); t2 passed 0.5×/0.25×;
           t3 incorrect; t4 rejected (a hack) and passed 4.0×/2.0×.
    beta:  t1 compile_error; t2 passed exactly 1.0× (not "faster") with no compile baseline;
           t3 queued and t4 'error' (neither is an attempt); one run on other hardware (not counted).
    """
    hw = make_hardware()
    other_hw = make_hardware(key="cuda:H200|torch-2.13.0|cuda-12.8")
    t1 = make_task(name="t1_relu", level=1)
    t2 = make_task(name="t2_gelu", level=1)
    t3 = make_task(name="t3_mlp", level=2)
    t4 = make_task(name="t4_attn", level=2)
    alpha = make_submitter(name="alpha", kind="model")
    beta = make_submitter(name="beta", kind="agent")

    def ev(sub, task, status, eager=None, compile=None, hardware=hw, **kw):
        return make_evaluation(
            kernel=make_kernel(task=task, submitter=sub),
            status=status,
            eager=eager,
            compile=compile,
            hardware=hardware,
            **kw,
        )

    data = {
        "hardware": hw,
        "tasks": (t1, t2, t3, t4),
        "alpha": alpha,
        "beta": beta,
        "a_t1_first": ev(alpha, t1, "passed", 2.0, 0.5),
        "a_t1_tie": ev(alpha, t1, "passed", 2.0, 3.0),
        "a_t2": ev(alpha, t2, "passed", 0.5, 0.25),
        "a_t3": ev(alpha, t3, "incorrect"),
        "a_t4_hack": ev(
            alpha,
            t4,
            "rejected",
            50.0,
            50.0,
            findings=[{"rule": "timer_mismatch", "severity": "reject", "message": "m", "family": 1}],
        ),
        "a_t4": ev(alpha, t4, "passed", 4.0, 2.0),
        "b_t1": ev(beta, t1, "compile_error"),
        "b_t2": ev(beta, t2, "passed", 1.0, None),
        "b_t3_queued": ev(beta, t3, "queued", hardware=None),
        "b_t4_error": ev(beta, t4, "error", hardware=hw),
        "b_other_hw": ev(beta, t3, "passed", 9.0, 9.0, hardware=other_hw),
        "a_open": ev(alpha, t3, "passed", 3.0, 3.0, track="open"),
    }
    return data


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def chromium_available() -> bool:
    return Path(CHROMIUM).exists() or shutil.which("chromium") is not None


@pytest.fixture
def new_kernel_source():
    """A fresh, valid pure-PyTorch kernel source each call (distinct hashes)."""
    return kernel_source


CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def browser_page():
    """A Playwright page in Debian's headless Chromium (never a downloaded browser)."""
    if not chromium_available():
        service_missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    from playwright import sync_api
    # Playwright's sync API runs an event loop in this thread; the ORM calls of the test are ours.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            yield page
        finally:
            browser.close()
            if previous is None:
                os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture(scope="session")
def stray_connections_closed(django_db_setup, django_db_blocker):
    """Live-server request threads can outlive a test with their connection open, which blocks dropping
    the test database at the end of the session; close those (our own test database only)."""
    yield
    from django.db import connection

    if connection.vendor != "postgresql":
        return
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
