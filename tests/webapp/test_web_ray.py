"""The Celery ``gpu`` queue feeds the Ray pool: with EVAL_POOL=ray a real worker hands its evaluation
to the cluster's named evaluator actor (a ``ray start --head`` cluster on loopback), and every
process that feeds it shares that one actor (integration)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.webapp.celery_broker import celery_worker
from tests.webapp.test_web_celery import SILU_OPEN
from webapp.arena import services

ray = pytest.importorskip("ray")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("TEST_RAY_REDIS_URL", "redis://127.0.0.1:6379/10")
ACTOR = "kernelarena-evaluator-0"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def ray_cluster(tmp_path):
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray_cli is None:
        pytest.skip("no ray command")
    address = f"127.0.0.1:{_free_port()}"
    # a loopback test cluster: no token (the Ray we test with, 2.60, asks clients for one by default)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
    started = subprocess.run(
        [ray_cli, "start", "--head", f"--port={address.split(':')[1]}",
         "--num-cpus=2", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats"],
        env=env, capture_output=True, text=True, timeout=300, check=False)
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
    try:
        yield address
    finally:
        subprocess.run([ray_cli, "stop", "--force"], env=env, capture_output=True, timeout=120, check=False)


def test_the_gpu_queue_hands_its_evaluation_to_the_ray_evaluator_actor(ray_cluster, settings, tmp_path,
                                                                        make_task, make_kernel):
    log_path = tmp_path / "worker.log"
    extra = {"EVAL_BASELINES": "eager", "EVAL_TRIALS": "2", "EVAL_POOL": "ray", "RAY_ADDRESS": ray_cluster}
    task_source = (ROOT / "gpu_workers/suite/tasks/silu.py").read_text()
    kernel = make_kernel(task=make_task(name="silu", source=task_source), source=SILU_OPEN)
    with celery_worker(queue="gpu", redis_url=REDIS_URL, settings=settings, log_path=log_path,
                       extra_env=extra) as worker:
        evaluation = services.evaluation_request(kernel_id=kernel.pk, track="open")
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and worker.poll() is None:
            evaluation.refresh_from_db()
            if evaluation.is_finished:
                break
            time.sleep(0.5)
        evaluation.refresh_from_db()
        log = log_path.read_text()
        assert evaluation.status == "passed", (evaluation.status, evaluation.error[-4000:], log[-2000:])
        worker_pid = worker.pid

    ray.init(address=ray_cluster, namespace="kernelarena", log_to_driver=False)
    try:
        actor = ray.get_actor(ACTOR, namespace="kernelarena")
        stats = ray.get(actor.stats.remote(), timeout=60)
        assert stats["served"] == 1  # the job ran in the actor, not in the Celery process
        assert stats["pid"] != worker_pid
        # another feeder gets the same actor, not one more
        from gpu_workers.pool import RayPool

        again = RayPool(name="kernelarena-evaluator")
        assert again.names == [ACTOR] and again.stats() == [stats]
        again.shutdown()
        ray.kill(actor)
    finally:
        ray.shutdown()
