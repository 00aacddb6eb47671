"""Evaluations spread over worker processes, each running its share of them at once on threads.

The parent's side of an evaluation is Python: it reads its children's messages, waits for them under
the GPU slot (looking every few milliseconds whether a timer waits), and judges the evidence. One
interpreter runs Python on one core at a time, so sixteen evaluations in the threads of one process
queue for it, and a judge with two seconds of work takes several. ``LocalPool(processes=P)`` runs
its evaluations in P worker processes instead (spawned: a fresh interpreter each, never a fork of a
threaded parent), each with an equal share of the workers on threads. What they share lives outside
any one process already: the GPU slot and the GPU memory ledger are files under ``flock``.

A worker process warms itself up when it starts (``warm_up``: its zygote, bridge and reference
children) and forwards its ``gpu_workers`` log records to the pool's process, where they are logged
again under their own names (the live progress of ``gpu_workers.progress``). Requests wait in the
pool's process until a worker has a free thread, so none waits behind a slow evaluation while
another process sits idle. A worker process that dies fails only its own evaluations in flight, as
infrastructure (evaluated again on resubmission), and is replaced.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import logging
import multiprocessing
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

from ..schema import INFRASTRUCTURE, EvalRequest, EvalResult

LOGGER = "gpu_workers"  # the records a worker process forwards: this logger and those below it


def _levels() -> dict[str, int]:
    """The levels this process has for ``gpu_workers`` and the loggers below it that set their own."""
    levels = {LOGGER: logging.getLogger(LOGGER).getEffectiveLevel()}
    for name, logger in logging.root.manager.loggerDict.items():
        if name.startswith(LOGGER + ".") and isinstance(logger, logging.Logger) and logger.level:
            levels[name] = logger.level
    return levels


class _Forward(logging.Handler):
    def __init__(self, send: Callable[[Any], None]):
        super().__init__(logging.DEBUG)
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._send(("log", record.name, record.levelno, record.getMessage()))
        except Exception:  # noqa: BLE001 - a pool that went away takes no more records
            pass


def _serve(conn: Any, threads: int, evaluate_fn: Callable[[EvalRequest], EvalResult], warm: str | None,
           gpus: list[int] | None, levels: dict[str, int]) -> None:
    """A worker process: say ``ready`` once warmed up (evaluations may arrive before), evaluate each
    request on one of ``threads`` threads, answer as each ends, stop at ``None`` (after what runs has
    ended) or when the pool's end of the pipe closes."""
    from ..judge import limit_threads

    limit_threads()
    lock = threading.Lock()

    def send(message: Any) -> None:
        with lock:
            conn.send(message)

    for name, level in levels.items():  # records the pool's process would drop are not sent
        logging.getLogger(name).setLevel(level)
    logger = logging.getLogger(LOGGER)
    logger.addHandler(_Forward(send))
    logger.propagate = False

    def warm_up() -> None:
        steps: dict[str, float] | str = {}
        if warm:
            from .warmup import warm_up as warm_up_steps

            try:
                steps = warm_up_steps(warm, gpus[0] if gpus else None, references=threads, gpus=gpus)
            except Exception as exc:  # noqa: BLE001 - the first evaluation does what was left
                steps = f"could not warm up for {warm}: {exc}"[:4000]
        send(("ready", steps))

    threading.Thread(target=warm_up, name="kernelcourt-warm-up", daemon=True).start()

    def run(job: int, request: EvalRequest) -> None:
        try:
            result = evaluate_fn(request)
        except BaseException as exc:  # noqa: BLE001 - the pool's future carries it
            send(("raised", job, f"{type(exc).__name__}: {exc}"))
            return
        send(("done", job, result))

    with cf.ThreadPoolExecutor(threads, thread_name_prefix="ka-eval") as executor:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message is None:
                break
            executor.submit(run, *message)


class _Worker:
    """One worker process and the pool's view of it: the jobs it holds, read back on a thread."""

    def __init__(self, spread: ProcessSpread, threads: int, index: int):
        self.threads, self.index = threads, index
        self.jobs: dict[int, tuple[cf.Future, EvalRequest]] = {}
        self.ready = threading.Event()
        self.warm_up: dict[str, float] | str = {}
        parent_end, child_end = spread.context.Pipe()
        self.conn = parent_end
        self.process = spread.context.Process(
            target=_serve, name=f"kernelcourt-pool-{index}", daemon=True,
            args=(child_end, threads, spread.evaluate_fn, spread.warm, spread.gpus, _levels()))
        self.process.start()
        child_end.close()
        self.reader = threading.Thread(target=spread._read, args=(self,), name=f"ka-pool-read-{index}", daemon=True)
        self.reader.start()


class ProcessSpread:
    """``submit(request) -> Future[EvalResult]`` over ``processes`` worker processes sharing
    ``workers`` threads between them (1 <= processes <= workers: ``LocalPool`` checks); with
    ``warm`` (``cuda``, ``cpu``), each warms itself up for that device (on each of ``gpus``) when it
    starts."""

    def __init__(self, workers: int, processes: int, evaluate_fn: Callable[[EvalRequest], EvalResult],
                 warm: str | None = None, gpus: list[int] | None = None):
        try:
            pickle.dumps(evaluate_fn)
        except Exception as exc:  # noqa: BLE001 - said plainly, not from inside a spawned process
            raise ValueError(f"evaluations in worker processes need a module-level function, not "
                             f"{evaluate_fn!r} ({exc})") from None
        self.context = multiprocessing.get_context("spawn")
        self.evaluate_fn, self.warm, self.gpus = evaluate_fn, warm, gpus
        self._lock = threading.Lock()
        self._waiting: collections.deque[tuple[int, cf.Future, EvalRequest]] = collections.deque()
        self._next_job = 0
        self._closing = False
        shares = [workers // processes + (i < workers % processes) for i in range(processes)]
        self._workers = [_Worker(self, share, i) for i, share in enumerate(shares)]

    def wait_ready(self, timeout_s: float = 600.0) -> bool:
        """Wait until every worker process has warmed up, up to ``timeout_s`` in all; returns whether
        all have."""
        deadline = time.monotonic() + timeout_s
        for worker in list(self._workers):
            worker.ready.wait(max(0.0, deadline - time.monotonic()))
        return all(w.ready.is_set() for w in self._workers)

    @property
    def warm_ups(self) -> list[dict[str, float] | str | None]:
        """Each worker process's warm-up: seconds per step, a string where it failed, None while it runs."""
        return [w.warm_up if w.ready.is_set() else None for w in self._workers]

    def submit(self, request: EvalRequest) -> cf.Future:
        future: cf.Future = cf.Future()
        with self._lock:
            if self._closing:
                raise RuntimeError("cannot submit to a pool that is shutting down")
            self._waiting.append((self._next_job, future, request))
            self._next_job += 1
            self._dispatch()
        return future

    def _dispatch(self) -> None:
        """Send waiting requests to the worker with the most free threads (under ``_lock``)."""
        while self._waiting:
            worker = max(self._workers, key=lambda w: w.threads - len(w.jobs))
            if len(worker.jobs) >= worker.threads:
                return
            job, future, request = self._waiting.popleft()
            if not future.set_running_or_notify_cancel():
                continue
            worker.jobs[job] = (future, request)
            try:
                worker.conn.send((job, request))
            except (OSError, ValueError):
                pass  # it died: its reader fails what it held, this request with it

    def _read(self, worker: _Worker) -> None:
        while True:
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                break
            if message[0] == "log":
                _, name, level, text = message
                logging.getLogger(name).log(level, text)
                continue
            if message[0] == "ready":
                worker.warm_up = message[1]
                worker.ready.set()
                continue
            kind, job = message[0], message[1]
            with self._lock:
                future, _ = worker.jobs.pop(job, (None, None))
                self._dispatch()
            if future is None:
                continue
            if kind == "done":
                future.set_result(message[2])
            else:
                future.set_exception(RuntimeError(message[2]))
        self._lost(worker)

    def _lost(self, worker: _Worker) -> None:
        """The worker's pipe closed: at shutdown, nothing more; else it died, and each evaluation
        it held ends as infrastructure, and a new process takes its place."""
        worker.process.join(timeout=5)
        with self._lock:
            held, worker.jobs = worker.jobs, {}
            if not self._closing:
                self._workers[worker.index] = _Worker(self, worker.threads, worker.index)
            self._dispatch()
        code = worker.process.exitcode
        for future, request in held.values():
            future.set_result(EvalResult(
                status="runtime_error", track=request.track, task_hash=request.task_hash,
                kernel_hash=request.kernel_hash,
                message=f"{INFRASTRUCTURE}the evaluation's worker process {worker.process.pid} ended "
                        f"(exit code {code}) while it ran; not the kernel's verdict"))

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closing = True
            if cancel_futures:
                for _, future, _ in self._waiting:
                    future.cancel()
                self._waiting.clear()
        if wait:
            while True:
                with self._lock:
                    busy = [f for w in self._workers for f, _ in w.jobs.values()] + [f for _, f, _ in self._waiting]
                if not busy:
                    break
                cf.wait(busy)
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except (OSError, ValueError):
                pass
        if wait:
            for worker in self._workers:
                worker.process.join()
                worker.reader.join(timeout=5)
