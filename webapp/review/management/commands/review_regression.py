"""Run the current checker over every confirmed hack; exit 1 if any is not rejected (for CI)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from webapp.review.services import regression_run


class Command(BaseCommand):
    help = "Check that the active rule sets reject every confirmed hack (static scan; --full also evaluates)."

    def add_arguments(self, parser):
        parser.add_argument("--full", action="store_true", help="also run gpu_workers.evaluate (slow)")

    def handle(self, *args, full: bool = False, **options):
        report = regression_run(full=full)
        for case in report.cases:
            verdict = ", ".join(case.by) if case.rejected else "NOT REJECTED"
            self.stdout.write(
                f"case {case.case_id} kernel {case.kernel_id} [{case.track}, family {case.family}]: {verdict}"
            )
        self.stdout.write(f"{len(report.cases)} confirmed hacks, rule sets {report.versions}")
        if report.not_rejected:
            raise CommandError(
                f"{len(report.not_rejected)} confirmed hacks get through: kernels {report.not_rejected}"
            )
