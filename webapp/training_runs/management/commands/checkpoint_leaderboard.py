"""``python manage.py checkpoint_leaderboard RUN_ID --step N --suite SUITE``: a checkpoint on the
leaderboard (the same service as the API endpoint and the admin action)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from webapp.training_runs import services


class Command(BaseCommand):
    help = "Evaluate a training checkpoint on a suite through the agent; its kernels enter the leaderboard."

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int)
        parser.add_argument("--step", type=int, required=True)
        parser.add_argument("--suite", required=True)
        parser.add_argument("--level", type=int, default=None)
        parser.add_argument("--rollout-settings", default="{}", help="the rollouts' settings as JSON (track, device, …)")

    def handle(self, *args, **options):
        try:
            settings = json.loads(options["rollout_settings"])
        except json.JSONDecodeError as exc:
            raise CommandError(f"--rollout-settings is not JSON: {exc}") from exc
        try:
            batch = services.training_checkpoint_leaderboard(
                run_id=options["run_id"], step=options["step"], suite=options["suite"],
                level=options["level"], settings=settings,
            )
        except services.InvalidInput as exc:
            raise CommandError(str(exc)) from exc
        ids = list(batch.rollouts.order_by("id").values_list("id", flat=True))
        self.stdout.write(json.dumps({"batch_id": batch.pk, "submitter": batch.submitter.name, "rollouts": ids}))
