import importlib.util
import sys

import pytest

from gpu_workers.workers.pool import LocalPool
from training.data import synthetic_tasks
from training.distributed import RAY_MISSING, LocalRolloutWorkers, init_ray, ray_available
from training.evaluation import make_evaluator_pool
from training.generation import PolicyBackend
from training.policy import ByteTokenizer, ModelSpec, PolicyGenerator, build_model
from training.recipes import EvaluatorConfig
from training.rollout import CollectSettings, RolloutCollector, SyntheticEnvironment


def test_local_path_without_ray():
    pool = make_evaluator_pool(EvaluatorConfig(workers=3, use_ray=False))
    assert isinstance(pool, LocalPool) and pool.workers == 3  # gpu_workers' own pool, not a second one
    pool.shutdown()
    tok = ByteTokenizer()
    collector = RolloutCollector(
        PolicyBackend(PolicyGenerator(build_model(ModelSpec(max_positions=64), tok, seed=0), tok), tok.eos_token_id),
        tok, SyntheticEnvironment(ord("a"), tok.eos_token_id),
        settings=CollectSettings(group_size=2, max_new_tokens=4, max_context=64))
    workers = LocalRolloutWorkers(collector)
    workers.sync_weights({})
    rollouts = workers.collect(synthetic_tasks(2))
    assert [(r.group, r.index) for r in rollouts] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_missing_ray_is_a_clear_error(monkeypatch):
    # given a machine without Ray (its import fails, whether or not it is installed here)
    monkeypatch.setitem(sys.modules, "ray", None)
    assert not ray_available()
    with pytest.raises(RuntimeError, match="Ray is not installed"):
        init_ray()
    with pytest.raises(RuntimeError, match=r"RayPool needs ray: pip install 'kernelcourt\[ray\]'"):
        make_evaluator_pool(EvaluatorConfig(use_ray=True))
    assert RAY_MISSING.startswith("Ray is not installed")


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")
def test_ray_rollout_workers_on_a_local_cluster():
    from training.distributed import RayRolloutWorkers
    from training.recipes import tiny_cpu_grpo

    cfg = tiny_cpu_grpo()
    init_ray()
    workers = RayRolloutWorkers(cfg, 0, num_workers=2)
    model = build_model(cfg.model, ByteTokenizer(), seed=cfg.seed)
    workers.sync_weights(model.state_dict())
    rollouts = workers.collect(synthetic_tasks(2))
    assert len(rollouts) == 2 * cfg.algo.group_size
    assert len({r.group for r in rollouts}) == 2


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")
def test_ray_evaluator_pool_scores_a_kernel():
    from gpu_workers import EvalRequest
    from gpu_workers.suite import get_task

    pool = make_evaluator_pool(EvaluatorConfig(use_ray=True, device="cpu", workers=1))
    kernel = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        return x * torch.sigmoid(x)\n")
    request = EvalRequest(task_source=get_task("silu").task_source, kernel_source=kernel, device="cpu",
                          track="open", trials=2, baselines=("eager",), timing_budget_s=0.2,
                          reward_config={"kind": "binary"})
    result = pool.submit(request).result(timeout=300)
    assert (result.status, result.reward) == ("passed", 1.0)
    pool.shutdown()


@pytest.fixture(autouse=True, scope="module")
def _shutdown_ray():
    yield
    if ray_available():
        import ray

        ray.shutdown()
