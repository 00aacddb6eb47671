"""``manage.py demo``: migrate, import the suite, add sample kernels, evaluate them for real on the
CPU evaluator (progress bar on stderr), then serve the app with daphne. A second run skips what exists."""

from __future__ import annotations

import sys

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from webapp.arena import importers, services
from webapp.arena.demo import DEMO_KERNELS, DEMO_SUBMITTERS
from webapp.arena.models import Evaluation, Kernel, Task
from webapp.rollouts.services import llm_endpoint_builtin_start


class Command(BaseCommand):
    help = "Set up a demo database with real evaluations and serve KernelCourt at http://HOST:PORT."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--no-serve", action="store_true", help="prepare the data, do not start the server"
        )

    def handle(self, *args, host, port, no_serve, **options):
        call_command("migrate", interactive=False, verbosity=0)
        report = importers.tasks_import_suite()
        self.stdout.write(f"suite: {report.summary()}")
        for error in report.errors:
            self.stderr.write(f"  {error}")
        pending = self._sample_kernels()
        self._evaluate(pending)
        if no_serve:
            return
        llm_endpoint_builtin_start()  # the rollout form's built-in endpoint, served from this process
        self.stdout.write(
            self.style.SUCCESS(f"KernelCourt at http://{host}:{port}/  (API docs at /api/docs)")
        )
        from daphne.cli import CommandLineInterface

        CommandLineInterface().run(["-b", host, "-p", str(port), "webapp.asgi:application"])

    def _sample_kernels(self) -> list[int]:
        """Create the demo kernels and their evaluation rows (no jobs: evaluated below, in order)."""
        suite_tasks = {
            t.name: t for t in __import__("gpu_workers.suite", fromlist=["list_tasks"]).list_tasks()
        }
        ids: list[int] = []
        for demo in DEMO_KERNELS:
            task = Task.objects.filter(suite=importers.BUILTIN_SUITE, name=demo.task).first()
            if task is None:
                self.stderr.write(f"skipping {demo.submitter}/{demo.task}: no such suite task")
                continue
            source = demo.source if demo.source is not None else suite_tasks[demo.task].cpu_kernel_source
            meta = DEMO_SUBMITTERS[demo.submitter]
            with transaction.atomic():
                submitter = services.submitter_get_or_create(
                    name=demo.submitter, kind=meta["kind"], metadata=meta["metadata"]
                )
                kernel, _ = services.kernel_create(
                    task=task, submitter=submitter, source=source, origin=Kernel.Origin.IMPORT
                )
                for track in demo.tracks:
                    evaluation = (
                        Evaluation.objects.filter(kernel=kernel, track=track)
                        .exclude(status=Evaluation.Status.ERROR)
                        .order_by("-id")
                        .first()
                    )
                    if evaluation is None:
                        evaluation = Evaluation.objects.create(kernel=kernel, track=track, device="cpu")
                    if not evaluation.is_finished:
                        ids.append(evaluation.pk)
        return ids

    def _evaluate(self, ids: list[int]) -> None:
        if not ids:
            self.stdout.write("all demo evaluations already done")
            return
        from tqdm import tqdm

        self.stdout.write(f"evaluating {len(ids)} kernels on the CPU (C++ builds take ~35 s the first time)")
        with tqdm(total=len(ids), file=sys.stderr, unit="eval") as bar:
            for evaluation_id in ids:
                evaluation = services.evaluation_run(evaluation_id=evaluation_id)
                if evaluation is not None:
                    bar.set_postfix_str(f"{evaluation.kernel.task.name}: {evaluation.status}")
                bar.update(1)
