from django.core.management.base import BaseCommand, CommandError

from webapp.arena.importers import KERNELBENCH_SUITE, kernels_import
from webapp.arena.services import InvalidInput

from ._report import write_report


class Command(BaseCommand):
    help = (
        "Import a submitter's generated kernels (JSONL/Parquet rows with level_id, task_id, custom_code, "
        "or a folder of level<N>/<task_id>_*.py files) and queue them for evaluation."
    )

    def add_arguments(self, parser):
        parser.add_argument("path")
        parser.add_argument("--submitter", required=True)
        parser.add_argument("--kind", default="model", choices=["model", "agent", "checkpoint", "human"])
        parser.add_argument("--suite", default=KERNELBENCH_SUITE)
        parser.add_argument("--track", default="strict", choices=["strict", "open"])

    def handle(self, *args, path, submitter, kind, suite, track, **options):
        try:
            report = kernels_import(
                submitter_name=submitter, path=path, suite=suite, track=track, submitter_kind=kind
            )
        except InvalidInput as exc:
            raise CommandError(str(exc)) from exc
        write_report(self, report)
        from webapp.core.jobs import embedded_jobs_wait

        embedded_jobs_wait()  # embedded mode: finish the queued evaluations before the command exits
