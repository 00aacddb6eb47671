"""``manage.py demo``: migrate, import the suite, create the demo's logins, add sample kernels,
evaluate them for real on the CPU evaluator (progress bar on stderr; review findings put the hacks in
the review queue), print the URL and the logins, then serve the app with daphne. SQLite and no broker
are enough. A second run skips what exists and gives the logins new passwords."""

from __future__ import annotations

import secrets
import sys

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import transaction

from webapp.arena import hooks, importers, services
from webapp.arena.demo import DEMO_KERNELS, DEMO_SUBMITTERS, DEMO_USERS
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
        logins = self._users()
        pending = self._sample_kernels()
        self._evaluate(pending)
        self._print_welcome(host=host, port=port, logins=logins)
        if no_serve:
            return
        endpoint = llm_endpoint_builtin_start()  # the rollout form's built-in endpoint, served from here
        self.stdout.write(f"Rollouts: the LLM endpoint {endpoint.name!r} (a scripted policy, no key) is ready")
        from daphne.cli import CommandLineInterface

        CommandLineInterface().run(["-b", host, "-p", str(port), "webapp.asgi:application"])

    def _users(self) -> list[tuple[str, str, str]]:
        """Create (or refresh) the demo logins; a new random password each run. [(username, password, role)]"""
        users = get_user_model()
        out = []
        for demo in DEMO_USERS:
            password = secrets.token_urlsafe(9)
            with transaction.atomic():
                user, _ = users.objects.get_or_create(username=demo.username)
                user.is_staff = user.is_superuser = demo.superuser
                user.is_active = True
                user.set_password(password)
                user.save()
                for name in demo.groups:  # made by the review app's migration, with its permission
                    user.groups.add(Group.objects.get(name=name))
            out.append((demo.username, password, demo.role))
        return out

    def _print_welcome(self, *, host: str, port: int, logins: list[tuple[str, str, str]]) -> None:
        base = f"http://{host}:{port}"
        open_cases = hooks.open_reviews()  # the review app's queue (arena never imports review)
        self.stdout.write(self.style.SUCCESS(f"KernelCourt at {base}/  (API docs at {base}/api/docs)"))
        self.stdout.write("Sign in at " + f"{base}/accounts/login/ with (demo only: new passwords every run):")
        for username, password, role in logins:
            self.stdout.write(f"  {username:<10} password {password:<14} {role}")
        if open_cases is not None:
            self.stdout.write(
                f"Review queue: {open_cases} open case{'s' if open_cases != 1 else ''} at {base}/review/ "
                "(a verdict needs two reviewers: sign in as each)"
            )

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
