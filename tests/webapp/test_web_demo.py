"""The demo's data setup is idempotent (the evaluations themselves are not run here)."""

from __future__ import annotations

import pytest

from webapp.arena import importers
from webapp.arena.demo import DEMO_KERNELS
from webapp.arena.management.commands.demo import Command
from webapp.arena.models import Evaluation, Kernel, Submitter

pytestmark = pytest.mark.django_db


def test_demo_sample_kernels_are_created_once():
    importers.tasks_import_suite()
    command = Command()

    first = command._sample_kernels()
    second = command._sample_kernels()

    assert first == second
    assert len(first) == sum(len(k.tracks) for k in DEMO_KERNELS)
    assert Kernel.objects.count() == len(DEMO_KERNELS)
    assert Evaluation.objects.filter(status="queued").count() == len(first)
    assert set(Submitter.objects.values_list("kind", flat=True)) == {"human", "model", "agent", "checkpoint"}
