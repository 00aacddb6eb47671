from django.core.management.base import BaseCommand

from webapp.arena.importers import tasks_import_suite

from ._report import write_report


class Command(BaseCommand):
    help = "Import the built-in task suite of gpu_workers.suite."

    def handle(self, *args, **options):
        write_report(self, tasks_import_suite())
