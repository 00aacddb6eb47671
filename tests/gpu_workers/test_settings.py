"""gpu_workers/settings.py: one frozen settings object, read from the environment once, the old
KERNELARENA_* names with a deprecation warning, and kept on every result."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path

import pytest

from gpu_workers import EvalRequest, evaluate, settings
from gpu_workers.reward import resolve_reward_config
from gpu_workers.rules import default_rule_set, validate_rule_set
from gpu_workers.settings import EvaluatorSettings, from_environ

TASK = (Path(__file__).resolve().parent / "hacks" / "tasks" / "scale_relu.py").read_text()


def test_the_settings_are_read_once_per_process(monkeypatch):
    # given a setting in the environment, read once
    monkeypatch.setenv("KERNELCOURT_JUDGE_THREADS", "3")
    first = settings.current()
    # when the environment changes afterwards
    monkeypatch.setenv("KERNELCOURT_JUDGE_THREADS", "5")
    # then the process keeps what it read
    assert settings.current() is first
    assert first.judge_threads == 3


def test_every_field_is_read_from_its_kernelcourt_variable_and_unset_ones_keep_their_defaults():
    got = from_environ({"KERNELCOURT_CACHE_DIR": "/srv/cache", "KERNELCOURT_GPU_SHARED_MAX": "4",
                        "KERNELCOURT_WARM_UP": "CUDA", "KERNELCOURT_REFERENCE_REUSE": "0",
                        "KERNELCOURT_SETTLE_WITHIN": "0.02", "KERNELCOURT_COMPILE_NICE": ""})
    assert got == dataclasses.replace(EvaluatorSettings(), cache_dir="/srv/cache", gpu_shared_max=4, warm_up="cuda",
                                      reference_reuse=False, settle_within=0.02)
    assert got.compile_nice == 10


def test_an_old_name_is_read_with_a_warning_that_names_the_new_one():
    with pytest.warns(DeprecationWarning, match="KERNELARENA_BASELINE_SAMPLES is deprecated: "
                                                "set KERNELCOURT_BASELINE_SAMPLES instead"):
        got = from_environ({"KERNELARENA_BASELINE_SAMPLES": "5"})
    assert got.baseline_samples == 5


def test_the_new_name_wins_over_the_old_one_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = from_environ({"KERNELARENA_JUDGE_THREADS": "2", "KERNELCOURT_JUDGE_THREADS": "4"})
    assert got.judge_threads == 4


@pytest.mark.parametrize(("name", "value", "message"), [
    ("KERNELCOURT_JUDGE_THREADS", "many", "KERNELCOURT_JUDGE_THREADS='many': expected an integer"),
    ("KERNELCOURT_SETTLE_WITHIN", "7", "KERNELCOURT_SETTLE_WITHIN=7.0 is out of range"),
    ("KERNELCOURT_COMPILE_NICE", "25", "KERNELCOURT_COMPILE_NICE=25 is out of range"),
    ("KERNELCOURT_WARM_UP", "tpu", "KERNELCOURT_WARM_UP='tpu' is out of range"),
    ("KERNELCOURT_HOST_WARM_S", "-1", "KERNELCOURT_HOST_WARM_S=-1.0 is out of range"),
    ("KERNELCOURT_PCH", "maybe", "KERNELCOURT_PCH='maybe': expected 1 or 0"),
])
def test_a_bad_value_is_refused_with_the_variable_named(name, value, message):
    with pytest.raises(ValueError) as caught:
        from_environ({name: value})
    assert str(caught.value) == message


def test_the_settings_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        EvaluatorSettings().judge_threads = 2  # type: ignore[misc]


def test_the_result_carries_the_settings_the_rule_set_and_the_reward_config_it_was_judged_with(tmp_path):
    # given explicit settings and a kernel the static scan rejects (no child needed)
    chosen = EvaluatorSettings(cache_dir=str(tmp_path), judge_threads=2, settle_within=0.03)
    request = EvalRequest(task_source=TASK, kernel_source="import torch\nclass ModelNew:\n    pass\n",
                          device="cpu", track="strict")
    # when
    result = evaluate(request, chosen)
    # then
    assert result.settings == {"evaluator": chosen.to_dict(),
                               "rule_set": validate_rule_set(default_rule_set("strict")),
                               "reward_config": resolve_reward_config(None)}
    assert result.to_dict()["settings"]["evaluator"]["settle_within"] == 0.03
