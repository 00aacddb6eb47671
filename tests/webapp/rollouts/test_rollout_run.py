"""rollout_run end to end: a scripted OpenAI-compatible server on loopback drives the real agent and
the real evaluator on a CPU task; the best passing kernel enters the leaderboard under its submitter."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connections
from rollout_helpers import GOOD_KERNEL, WRONG_KERNEL, error, kernel_reply, reply

from webapp.arena import selectors as arena_selectors
from webapp.rollouts import selectors, services
from webapp.rollouts.models import Rollout, RolloutEvent


def _launch(task, server, *, max_turns=4, submitter="scripted-agent") -> Rollout:
    services.llm_endpoint_register(name="scripted", base_url=server.url, model="scripted")
    return services.rollout_launch(
        task_id=task.pk,
        submitter_name=submitter,
        endpoint="scripted",
        settings={"max_turns": max_turns, "track": "open", "device": "cpu"},
    )


@pytest.mark.slow
@pytest.mark.django_db
def test_a_rollout_runs_and_its_best_kernel_enters_the_leaderboard(relu_add_task, llm_server):
    server = llm_server(
        [
            reply(kernel_reply(WRONG_KERNEL, note="First try.")),
            reply(kernel_reply(GOOD_KERNEL, note="Fixed the sign.")),
        ]
    )
    rollout = _launch(relu_add_task, server)

    finished = services.rollout_run(rollout_id=rollout.pk)
    second_delivery = services.rollout_run(rollout_id=rollout.pk)

    rollout.refresh_from_db()
    events = list(RolloutEvent.objects.filter(rollout=rollout).order_by("seq"))
    candidates = selectors.rollout_candidates(rollout_id=rollout.pk)
    kernel = rollout.best_kernel
    entries = arena_selectors.leaderboard_entries(
        track="open", hardware_id=rollout.best_evaluation.hardware_id, submitter_id=rollout.submitter_id
    )
    _, rows, _ = arena_selectors.leaderboard_rows(
        track="open", hardware_key=rollout.best_evaluation.hardware.key
    )
    assert finished.pk == rollout.pk
    assert second_delivery is None  # idempotent: a redelivered job does nothing
    assert (rollout.status, rollout.stop_reason, rollout.passed, rollout.turns) == (
        "succeeded",
        "success",
        True,
        2,
    )
    assert (rollout.prompt_tokens, rollout.completion_tokens, rollout.evaluations) == (200, 40, 2)
    assert [e.seq for e in events] == list(range(len(events)))
    assert [events[0].kind, events[1].kind, events[-1].kind] == ["system", "user", "summary"]
    assert events[-1].data["passed"] is True
    assert [(c["turn"], c["status"]) for c in candidates] == [(1, "incorrect"), (2, "passed")]
    assert (kernel.origin, kernel.submitter.name, kernel.task_id) == (
        "rollout",
        "scripted-agent",
        relu_add_task.pk,
    )
    assert kernel.source == GOOD_KERNEL
    assert kernel.metadata["rollout_id"] == rollout.pk
    assert (
        rollout.best_evaluation.status,
        rollout.best_evaluation.track,
        rollout.best_evaluation.correct,
    ) == (
        "passed",
        "open",
        True,
    )
    assert [(e.task_id, e.passed, e.kernel_id) for e in entries] == [(relu_add_task.pk, True, kernel.pk)]
    assert [(r.submitter, r.tasks_attempted, r.tasks_passed) for r in rows] == [("scripted-agent", 1, 1)]
    assert "best_kernel" not in rollout.summary


@pytest.mark.django_db
def test_a_failing_endpoint_fails_the_rollout_and_nothing_enters_the_leaderboard(relu_add_task, llm_server):
    server = llm_server([error(400, '{"error": {"message": "model not found"}}')])
    rollout = _launch(relu_add_task, server)

    services.rollout_run(rollout_id=rollout.pk)

    rollout.refresh_from_db()
    kinds = list(RolloutEvent.objects.filter(rollout=rollout).order_by("seq").values_list("kind", flat=True))
    assert (rollout.status, rollout.stop_reason, rollout.passed) == ("failed", "llm_error", False)
    assert "HTTP 400" in rollout.error and "model not found" in rollout.error
    assert kinds == ["system", "user", "error", "summary"]
    assert rollout.best_kernel is None
    assert rollout.finished is not None


@pytest.mark.django_db
def test_a_rollout_without_a_passing_kernel_stores_no_kernel(relu_add_task, llm_server):
    server = llm_server([reply("I am not sure what to write."), reply("Still thinking.")])
    rollout = _launch(relu_add_task, server, max_turns=2)

    services.rollout_run(rollout_id=rollout.pk)

    rollout.refresh_from_db()
    assert (rollout.status, rollout.stop_reason, rollout.turns, rollout.passed) == (
        "succeeded",
        "max_turns",
        2,
        False,
    )
    assert rollout.best_kernel is None
    assert rollout.task.kernels.count() == 0


@pytest.mark.django_db
def test_a_queued_rollout_cancelled_never_runs(relu_add_task, llm_server):
    server = llm_server([reply("never asked")])
    rollout = _launch(relu_add_task, server)

    cancelled = services.rollout_cancel(rollout_id=rollout.pk)
    ran = services.rollout_run(rollout_id=rollout.pk)

    assert (cancelled.status, cancelled.stop_reason, cancelled.cancel_requested) == (
        "cancelled",
        "cancelled",
        True,
    )
    assert ran is None
    assert server.requests == []
    assert RolloutEvent.objects.filter(rollout=rollout).count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_running_rollout_stops_when_cancelled(relu_add_task, llm_server, make_rollout):
    server = llm_server([reply("thinking…", delay=0.5) for _ in range(20)])
    # created directly: in autocommit the inline job backend would run a launched rollout at once
    rollout = make_rollout(task=relu_add_task, base_url=server.url, max_turns=20)

    def run() -> None:
        try:
            services.rollout_run(rollout_id=rollout.pk)
        finally:
            connections.close_all()

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while not RolloutEvent.objects.filter(rollout=rollout, kind="assistant").exists():
        assert time.monotonic() < deadline, "the rollout never answered"
        time.sleep(0.1)
    services.rollout_cancel(rollout_id=rollout.pk)
    worker.join(timeout=30)

    rollout.refresh_from_db()
    last = RolloutEvent.objects.filter(rollout=rollout).order_by("-seq").first()
    assert not worker.is_alive()
    assert (rollout.status, rollout.stop_reason, rollout.cancel_requested) == ("cancelled", "cancelled", True)
    assert 1 <= rollout.turns < 20
    assert (last.kind, last.data["stop_reason"]) == ("summary", "cancelled")
