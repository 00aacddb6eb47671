from django.core.management.base import BaseCommand, CommandError

from webapp.arena.importers import tasks_import_kernelbench
from webapp.arena.services import InvalidInput

from ._report import write_report


class Command(BaseCommand):
    help = "Import the level1..level3 task folders of a KernelBench checkout (PATH or PATH/KernelBench)."

    def add_arguments(self, parser):
        parser.add_argument("path")

    def handle(self, *args, path, **options):
        try:
            write_report(self, tasks_import_kernelbench(path=path))
        except InvalidInput as exc:
            raise CommandError(str(exc)) from exc
