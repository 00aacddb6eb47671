"""Evaluations that ended ``error`` before the job runner were the evaluator's own failures: mark them
as infrastructure errors, as the runner marks new ones (so a resubmission evaluates again)."""

from django.db import migrations


def forwards(apps, schema_editor):
    Evaluation = apps.get_model("arena", "Evaluation")
    Evaluation.objects.filter(status="error", error_kind="").update(error_kind="infrastructure")


def backwards(apps, schema_editor):
    pass  # the field is dropped by the schema migration's reverse


class Migration(migrations.Migration):
    dependencies = [("arena", "0002_job_runner_fields")]

    operations = [migrations.RunPython(forwards, backwards)]
