from django.core.management.base import BaseCommand, CommandError

from webapp.arena.importers import TRAINING_SUITE, tasks_import_training
from webapp.arena.services import InvalidInput

from ._report import write_report


class Command(BaseCommand):
    help = "Import training tasks from JSONL or Parquet rows with ops, data_source and code (Ops-6K layout)."

    def add_arguments(self, parser):
        parser.add_argument("file")
        parser.add_argument("--suite", default=TRAINING_SUITE)

    def handle(self, *args, file, suite, **options):
        try:
            write_report(self, tasks_import_training(path=file, suite=suite))
        except InvalidInput as exc:
            raise CommandError(str(exc)) from exc
