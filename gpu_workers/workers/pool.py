"""Worker pools with one interface: ``submit(request) -> Future[EvalResult]`` and ``map``.

Every evaluation already runs its untrusted phases in child processes, so the local pool needs only
threads to keep several evaluations in flight, in one process or spread over a few (``spread``). The
Ray pool places one evaluator actor per GPU.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..schema import EvalRequest, EvalResult


def _safe_evaluate(request: EvalRequest) -> EvalResult:
    from ..evaluator import evaluate
    from ..tasks import TaskError

    try:
        return evaluate(request)
    except TaskError as exc:
        return EvalResult(status="runtime_error", message=f"unusable task: {exc}", track=request.track,
                          task_hash=request.task_hash, kernel_hash=request.kernel_hash)


class _Pool:
    """What both pools offer on top of their own ``submit``."""

    def submit(self, request: EvalRequest) -> cf.Future:
        raise NotImplementedError

    def evaluate(self, request: EvalRequest) -> EvalResult:
        return self.submit(request).result()

    def map(self, requests: Iterable[EvalRequest]) -> Iterator[EvalResult]:
        futures = [self.submit(r) for r in requests]
        for future in futures:
            yield future.result()

    def as_completed(self, requests: Iterable[EvalRequest]) -> Iterator[tuple[int, EvalResult]]:
        """(index among the requests, result) as each evaluation finishes."""
        futures = {self.submit(r): i for i, r in enumerate(requests)}
        for future in cf.as_completed(futures):
            yield futures[future], future.result()

    def shutdown(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


class LocalPool(_Pool):
    """N evaluations at a time on this machine; GPU requests are spread over ``gpus``.

    With ``processes`` > 1 the N evaluations run in that many worker processes, N/processes on
    threads in each (``spread.ProcessSpread``): the parent's side of an evaluation is Python, and one
    process runs Python on one core at a time. ``warm`` (``cuda`` or ``cpu``): each worker process
    warms itself up for that device when it starts (``wait_ready`` waits for it)."""

    def __init__(self, workers: int = 1, gpus: int = 0,
                 evaluate_fn: Callable[[EvalRequest], EvalResult] = _safe_evaluate, processes: int = 1,
                 warm: str | None = None):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        if not 1 <= processes <= workers:
            raise ValueError(f"processes must be between 1 and the workers ({workers}), not {processes}")
        from ..judge import limit_threads

        limit_threads()  # a worker judges many evaluations at once: one torch thread each
        self.workers = workers
        self.gpus = gpus
        self.processes = processes
        self._evaluate = evaluate_fn
        self._next_gpu = 0
        self._spread = None
        self._warming = None
        gpu_list = list(range(gpus)) if warm == "cuda" and gpus else None
        if processes > 1:
            from .spread import ProcessSpread

            self._spread = ProcessSpread(workers, processes, evaluate_fn, warm=warm, gpus=gpu_list)
        else:
            self._executor = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ka-eval")
            if warm:
                from .warmup import warm_up_in_background

                self._warming = warm_up_in_background(warm, 0 if warm == "cuda" else None, who="local pool",
                                                      references=-(-workers // max(gpus, 1)), gpus=gpu_list)

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        """Wait until the warm-up asked for has ended, in every worker process; returns whether it
        ended within ``timeout_s``."""
        if self._spread is not None:
            return self._spread.wait_ready(timeout_s)
        if self._warming is not None:
            self._warming.join(timeout_s)
            return not self._warming.is_alive()
        return True

    @property
    def warm_ups(self) -> list[Any]:
        """What each worker process's warm-up took (``spread.ProcessSpread.warm_ups``); [] in-process."""
        return self._spread.warm_ups if self._spread is not None else []

    def submit(self, request: EvalRequest) -> cf.Future:
        if request.device == "cuda" and self.gpus and request.gpu_index is None:
            request.gpu_index = self._next_gpu % self.gpus
            self._next_gpu += 1
        if self._spread is not None:
            return self._spread.submit(request)
        return self._executor.submit(self._evaluate, request)

    def shutdown(self) -> None:
        if self._spread is not None:
            self._spread.shutdown(wait=True, cancel_futures=True)
        else:
            self._executor.shutdown(wait=True, cancel_futures=True)


@contextlib.contextmanager
def _real_stderr() -> Iterator[None]:
    """ray.init enables faulthandler on sys.stderr, which needs a file descriptor; a Celery worker's
    sys.stderr is a logging proxy without one. Lend it the process's own stderr meanwhile."""
    try:
        sys.stderr.fileno()
        usable = True
    except (AttributeError, OSError, ValueError):
        usable = False
    if usable or sys.__stderr__ is None:
        yield
        return
    saved, sys.stderr = sys.stderr, sys.__stderr__
    try:
        yield
    finally:
        sys.stderr = saved


def _actor_class(ray: Any, gpus: int, concurrency: int) -> Any:
    @ray.remote(num_gpus=1 if gpus else 0, max_concurrency=concurrency, max_restarts=-1, max_task_retries=1)
    class EvaluatorActor:  # CUDA is initialised inside the actor's own children, never in the actor
        def __init__(self) -> None:
            import os

            self.pid = os.getpid()
            self.served = 0
            from ..judge import limit_threads

            limit_threads()  # its evaluations judge at once: one torch thread each
            self._warming = None
            if gpus:  # the zygote and the bridge before the first evaluation, not during it
                from .warmup import warm_up_in_background

                self._warming = warm_up_in_background("cuda", 0, who="Ray evaluator actor", references=concurrency)

        def ready(self, timeout_s: float) -> bool:
            """Whether the actor's warm-up has ended (or it has none), waiting up to ``timeout_s``."""
            if self._warming is not None:
                self._warming.join(timeout_s)
                return not self._warming.is_alive()
            return True

        def evaluate(self, payload: dict[str, Any]) -> dict[str, Any]:
            request = EvalRequest.from_dict(payload)
            request.gpu_index = 0  # the first of the GPUs Ray gave this actor (its CUDA_VISIBLE_DEVICES)
            result = _safe_evaluate(request).to_dict()
            self.served += 1
            return result

        def stats(self) -> dict[str, int]:
            return {"pid": self.pid, "served": self.served}

    return EvaluatorActor


class RayPool(_Pool):
    """One evaluator actor per GPU (``num_gpus=1``), joined through RAY_ADDRESS when set.

    Each actor runs up to ``concurrency`` evaluations at once (a threaded actor): their compiles and
    child starts overlap, and the GPU slot (``gpuslot``) keeps every timing alone on the actor's
    GPU. With ``name``, the actors are named, detached and shared: every process that asks
    for the same name on the cluster (each Celery worker process of the ``gpu`` queue) gets the same
    actors, so a node still has one actor per GPU however many processes feed it. An actor that dies
    is restarted and its evaluations in flight are retried once."""

    def __init__(self, actors: int | None = None, address: str | None = None, concurrency: int = 4,
                 name: str | None = None, namespace: str = "kernelcourt"):
        try:
            import ray
        except ImportError as exc:  # Ray is optional at import
            raise RuntimeError("RayPool needs ray: pip install 'kernelcourt[ray]' (or use LocalPool)") from exc
        import os

        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self._ray = ray
        if not ray.is_initialized():
            with _real_stderr():
                ray.init(address=address or os.environ.get("RAY_ADDRESS") or None, ignore_reinit_error=True,
                         namespace=namespace)
        gpus = int(ray.cluster_resources().get("GPU", 0))
        count = actors or max(gpus, 1)
        actor_class = _actor_class(ray, gpus, concurrency)
        self.names = [f"{name}-{i}" for i in range(count)] if name else []
        if name:
            self._actors = [actor_class.options(name=n, namespace=namespace, get_if_exists=True,
                                                lifetime="detached").remote() for n in self.names]
        else:
            self._actors = [actor_class.remote() for _ in range(count)]
        self._next = 0
        self._executor = cf.ThreadPoolExecutor(max_workers=count * concurrency)

    def submit(self, request: EvalRequest) -> cf.Future:
        actor = self._actors[self._next % len(self._actors)]
        self._next += 1
        ref = actor.evaluate.remote(request.to_dict())
        return self._executor.submit(lambda: EvalResult.from_dict(self._ray.get(ref)))

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        """Wait until every actor has warmed up (the zygote, the bridge, its reference children), as a
        worker that has been up a while has; evaluations sent before then overlap the warm-up.
        Returns whether all of them ended it within ``timeout_s``."""
        return all(self._ray.get([actor.ready.remote(timeout_s) for actor in self._actors]))

    def stats(self) -> list[dict[str, int]]:
        """Each actor's process id and how many evaluations it has finished."""
        return self._ray.get([actor.stats.remote() for actor in self._actors])

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True)


_shared_pools: dict[tuple[int, str], RayPool] = {}


def shared_ray_pool(name: str = "kernelcourt-evaluator") -> RayPool:
    """This process's handle on the cluster's named evaluator actors (RAY_ADDRESS), made once per
    process: what the Celery ``gpu`` queue feeds with EVAL_POOL=ray."""
    import os

    key = (os.getpid(), name)
    if key not in _shared_pools:
        _shared_pools[key] = RayPool(name=name)
    return _shared_pools[key]
