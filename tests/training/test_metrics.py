import io
import json

from training.metrics import JsonlSink, RunMetrics, TrajectorySample, rollout_metrics
from training.rollout import Rollout, Turn, TurnOutcome


def rollout(*outcomes, index=0):
    r = Rollout(task_name="t", group=0, index=index, prompt_ids=[1])
    r.turns = [Turn(action_ids=[7] * 4, text="x", outcome=o) for o in outcomes]
    return r


def result(status, eager=None, compile=None, findings=()):
    return {"status": status, "correct": status == "passed", "speedup": {"eager": eager, "compile": compile},
            "findings": list(findings)}


def test_rollout_metrics_rates():
    rollouts = [
        rollout(TurnOutcome(3.0, "passed", result("passed", 2.0, 1.5), latency_s=1.0)),
        rollout(TurnOutcome(-1.0, "incorrect", result("incorrect"), latency_s=3.0),
                TurnOutcome(2.0, "passed", result("passed", 1.5, 0.8), latency_s=2.0), index=1),
        rollout(TurnOutcome(-1.0, "rejected", result("rejected", findings=[{"rule": "r", "severity": "reject"}]),
                            latency_s=2.0), index=2),
        rollout(TurnOutcome(-1.0, "format_error"), index=3),
    ]
    m = rollout_metrics(rollouts)
    assert (m["reward_mean"], m["reward_max"], m["reward_min"]) == (0.75, 3.0, -1.0)  # best turn per rollout
    assert (m["pass_rate"], m["faster_than_eager_rate"], m["faster_than_compile_rate"]) == (0.5, 0.5, 0.25)
    assert (m["hack_rate"], m["format_error_rate"], m["timeout_rate"]) == (0.25, 0.25, 0.0)
    assert (m["eval_latency_mean_s"], m["eval_latency_max_s"]) == (2.0, 3.0)
    assert (m["response_length_mean"], m["turns_mean"]) == (5.0, 1.25)


def test_synthetic_rewards_leave_evaluator_rates_empty():
    m = rollout_metrics([rollout(TurnOutcome(0.5, "synthetic"))])
    assert m["reward_mean"] == 0.5 and "pass_rate" not in m


def test_jsonl_sink_writes_one_object_per_line():
    out = io.StringIO()
    sink = JsonlSink(out)
    sink.emit_metrics(RunMetrics(step=1, stage="s", stage_kind="grpo", stage_step=1, reward_mean=float("nan")))
    sink.emit_trajectories(1, [TrajectorySample.from_rollout(1, rollout(TurnOutcome(1.0, "synthetic")))])
    first, second = [json.loads(line) for line in out.getvalue().splitlines()]
    assert first["type"] == "metrics" and first["reward_mean"] is None  # NaN is not JSON
    assert second["type"] == "trajectories" and second["samples"][0]["turns"][0]["reward"] == 1.0
    assert RunMetrics.from_dict(first).step == 1
