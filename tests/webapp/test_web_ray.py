"""The Celery ``gpu`` queue feeds the Ray pool: with EVAL_POOL=ray a real worker hands its evaluation
to the cluster's named evaluator actor (a ``ray start --head`` cluster on loopback), and every
process that feeds it shares that one actor (integration)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.webapp.celery_broker import celery_worker, wait_finished
from webapp.arena import services

ray = pytest.importorskip("ray")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("stray_connections_closed"),
]

REDIS_URL = os.environ.get("TEST_RAY_REDIS_URL", "redis://127.0.0.1:6379/10")
ACTOR = "kernelcourt-evaluator-0"


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
                                                                        make_silu_kernel):
    log_path = tmp_path / "worker.log"
    extra = {"EVAL_BASELINES": "eager", "EVAL_TRIALS": "2", "EVAL_POOL": "ray", "RAY_ADDRESS": ray_cluster}
    kernel = make_silu_kernel()
    with celery_worker(queue="gpu", redis_url=REDIS_URL, settings=settings, log_path=log_path,
                       extra_env=extra) as worker:
        evaluation = wait_finished(services.evaluation_request(kernel_id=kernel.pk, track="open"), 400, worker)
        log = log_path.read_text()
        assert evaluation.status == "passed", (evaluation.status, evaluation.error[-4000:], log[-2000:])
        worker_pid = worker.pid

    ray.init(address=ray_cluster, namespace="kernelcourt", log_to_driver=False)
    try:
        actor = ray.get_actor(ACTOR, namespace="kernelcourt")
        stats = ray.get(actor.stats.remote(), timeout=60)
        assert stats["served"] == 1  # the job ran in the actor, not in the Celery process
        assert stats["pid"] != worker_pid
        # another feeder gets the same actor, not one more
        from gpu_workers.workers.pool import RayPool

        again = RayPool(name="kernelcourt-evaluator")
        assert again.names == [ACTOR] and again.stats() == [stats]
        again.shutdown()
        ray.kill(actor)
    finally:
        ray.shutdown()
