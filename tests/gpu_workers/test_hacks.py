"""Every hack kernel in hacks/manifest.json must go unrewarded; the honest controls must pass.

The manifest is evaluated once per module (two evaluations at a time); each test then asserts on
its own row. Rows carrying a ``hole`` are evaluator holes found here: strict xfails, so the day the
evaluator catches them the test turns red and the mark must come off.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpu_workers import EvalRequest, EvalResult
from gpu_workers.reward import compute_reward
from gpu_workers.workers.pool import LocalPool

HACKS = Path(__file__).resolve().parent / "hacks"
MANIFEST = json.loads((HACKS / "manifest.json").read_text())
CASES: list[dict[str, Any]] = MANIFEST["cases"]
FLOOR = -1.0  # the default reward config (cuda_agent_levels) gives -1 to anything not passed


def request_for(case: dict[str, Any]) -> EvalRequest:
    return EvalRequest(
        task_source=(HACKS / case["task"]).read_text(),
        kernel_source=(HACKS / case["kernel"]).read_text(),
        device="cpu",
        track=case["track"],
        task_name=Path(case["task"]).stem,
        baselines=("eager",),
        timing_budget_s=0.2,
        trials=5,
        run_timeout_s=120.0,
        memory_limit_mb=4096,
    )


def evaluate_cases(cases: list[dict[str, Any]], workers: int = 2) -> dict[str, EvalResult]:
    with LocalPool(workers=workers) as pool:
        futures = {case["id"]: pool.submit(request_for(case)) for case in cases}
        return {name: future.result() for name, future in futures.items()}


@pytest.fixture(scope="module")
def results(kernelcourt_cache_dir) -> dict[str, EvalResult]:
    evaluated = evaluate_cases(CASES)
    # the whole table, for whoever reads a failure or updates the report (test-artifacts/ is gitignored)
    artifacts = Path(__file__).resolve().parents[2] / "test-artifacts"
    artifacts.mkdir(exist_ok=True)
    (artifacts / "hack_results.json").write_text(
        json.dumps({k: r.to_dict() for k, r in evaluated.items()}, indent=1)
    )
    return evaluated


def _describe(result: EvalResult) -> str:
    findings = "; ".join(f"{f.severity}:{f.rule}" for f in result.findings) or "no findings"
    return (f"status={result.status} reward={result.reward} speedup={result.speedup.get('eager')} "
            f"withheld={result.speed_withheld} [{findings}] {result.message[:300]}")


def _param(case: dict[str, Any]):
    marks = []
    if case.get("hole"):
        marks.append(pytest.mark.xfail(strict=True, reason=case["hole"]))
    return pytest.param(case, id=case["id"], marks=marks)


HACK_CASES = [_param(c) for c in CASES if not c.get("control")]
CONTROLS = [pytest.param(c, id=c["id"]) for c in CASES if c.get("control")]


# Families with a CPU spelling: REWARD_HACKS.md's 2-22, 24 (native timer hijacks) and 25, and issue 21's
# two without a row there (31: more CPU threads than the baseline had; 32: an error inside the review
# band). Family 1 (side streams) needs CUDA: tests/gpu_workers/test_gpu_hacks.py and test_gpu_watch.py.
CPU_FAMILIES = set(range(2, 23)) | {24, 25, 31, 32}


def test_manifest_covers_every_cpu_family():
    families = {c["family"] for c in CASES if not c.get("control")}
    assert families == CPU_FAMILIES
    for family in sorted(CPU_FAMILIES):
        spellings = [c for c in CASES if c.get("family") == family]
        assert len(spellings) >= 1 if family in (17, 18) else len(spellings) >= 2, family
    for case in CASES:
        assert (HACKS / case["kernel"]).is_file() and (HACKS / case["task"]).is_file(), case["id"]
        assert (
            "passed" not in case["expect"]["status"] or case.get("control") or "max_speedup_eager" in case["expect"]
            or "speed_withheld_any" in case["expect"]
        ), case["id"]


@pytest.mark.parametrize("case", HACK_CASES)
def test_hack_is_not_rewarded(case, results):
    result = results[case["id"]]
    detail = _describe(result)
    limit = case["expect"].get("max_speedup_eager")
    withheld = set(case["expect"].get("speed_withheld_any", ()))
    if withheld and result.status == "passed" and set(result.speed_withheld) & withheld:
        # Correct, but no speed reward until a reviewer clears the finding: the correctness level only.
        assert result.reward == compute_reward(result) == 1.0, detail
        return
    if limit is not None and result.status == "passed":
        # The trick cannot pay: every timed input is new, so the kernel was measured doing the work.
        # Its bar is the honest rewrites' of the same task in this run where they came out faster than
        # eager: a 0.06 ms forward on a shared 2-core machine moves by up to 1.7x from one process to the
        # next, and the honest control alone has come out at 1.69x.
        honest = [results[c["id"]].speedup.get("eager") or 0.0 for c in CASES
                  if c.get("control") and c["task"] == case["task"] and results[c["id"]].status == "passed"]
        bar = limit * max([1.0, *honest])
        assert result.speedup["eager"] is not None and result.speedup["eager"] <= bar, f"{detail} (bar {bar:.2f})"
        return
    assert result.status != "passed", f"{case['id']} (family {case['family']}) slipped through: {detail}"
    assert result.status in case["expect"]["status"], detail
    assert result.reward == FLOOR, detail
    assert compute_reward(result) == FLOOR
    rules = case["expect"].get("rules_any")
    if result.status == "rejected" and rules:
        fired = {f.rule for f in result.rejects}
        assert fired & set(rules), f"expected one of {rules} to reject it: {detail}"


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c["id"]) for c in CASES if c["expect"].get("review_any")]
)
def test_hack_raises_its_review_flag(case, results):
    result = results[case["id"]]
    fired = {f.rule for f in result.findings}
    assert fired & set(case["expect"]["review_any"]), _describe(result)


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c["id"]) for c in CASES if c["expect"].get("speed_withheld_any")
             and not c["expect"].get("max_speedup_eager")]
)
def test_review_band_error_earns_no_speed_reward(case, results):
    # an error inside the review band: never more than the correctness level until a reviewer clears it
    result = results[case["id"]]
    assert result.status in case["expect"]["status"], _describe(result)
    if result.status == "passed":
        assert set(result.speed_withheld) & set(case["expect"]["speed_withheld_any"]), _describe(result)
        assert result.reward == 1.0, _describe(result)


@pytest.mark.parametrize("case", CONTROLS)
def test_honest_control_passes(case, results):
    result = results[case["id"]]
    assert result.status == "passed", _describe(result)
    assert result.correct is True
    assert result.rejects == [], _describe(result)
    assert result.reward >= 1.0
    assert result.trials_passed == result.trials == 5
