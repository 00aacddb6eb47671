from webapp.arena.importers import ImportReport


def write_report(command, report: ImportReport) -> None:
    for error in report.errors:
        command.stderr.write(f"error {error}")
    style = command.style.SUCCESS if not report.errors else command.style.WARNING
    command.stdout.write(style(report.summary()))
