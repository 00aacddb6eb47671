from agent.tools import (
    describe_compile,
    describe_profile,
    describe_submit,
    describe_verify,
    tool_specs,
    truncate,
)
from gpu_workers.schema import EvalResult, Finding


def test_truncate_keeps_head_and_tail_within_limit():
    text = "HEAD" + "x" * 10_000 + "TAIL"

    cut = truncate(text, 200)

    assert len(cut) == 200
    assert cut.startswith("HEAD") and cut.endswith("TAIL")
    assert "characters cut" in cut
    assert truncate("short", 200) == "short"


def test_compile_error_observation_carries_the_bounded_log():
    result = EvalResult(status="compile_error", message="build failed", compile_log="error: " + "e" * 20_000)

    text = describe_compile(result, 4096)

    assert text.startswith("compile: FAILED\nbuild failed\ncompiler log:\nerror: ")
    assert len(text) == 4096


def test_verify_observation_lists_status_errors_and_findings():
    result = EvalResult(
        status="rejected",
        correct=True,
        trials=3,
        trials_passed=3,
        max_abs_error=1e-7,
        message="library_compute: ATen compute ops ran",
        findings=[Finding(rule="library_compute", severity="reject", message="aten::add ×5")],
    )

    assert describe_verify(result, 4096) == (
        "status: rejected\ncorrect: true\ntrials passed: 3/3\nmax abs error: 1e-07\n"
        "message: library_compute: ATen compute ops ran\nfindings:\n- [reject] library_compute: aten::add ×5"
    )


def test_profile_and_submit_observations_show_timings_and_speedups():
    result = EvalResult(
        status="passed",
        correct=True,
        reward=1.0,
        trials=2,
        trials_passed=2,
        timings_ms={"kernel": 0.5, "eager": 1.0, "compile": None},
        speedup={"eager": 2.0, "compile": None},
    )

    profile = describe_profile(result, 4096)
    submit = describe_submit(result, 4096, accepted=True)

    assert profile.splitlines()[0] == "timings: kernel 0.5 ms, eager 1 ms (speedup 2x)"
    assert submit.splitlines()[:3] == [
        "submission: ACCEPTED",
        "reward: 1",
        "timings: kernel 0.5 ms, eager 1 ms (speedup 2x)",
    ]


def test_tool_specs_declare_four_tools_taking_source():
    specs = tool_specs()

    assert [s["function"]["name"] for s in specs] == ["compile", "verify", "profile", "submit"]
    assert all(s["function"]["parameters"]["required"] == ["source"] for s in specs)
