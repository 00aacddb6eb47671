from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from webapp.accounts.services import api_token_create


class Command(BaseCommand):
    help = "Create an API token for USERNAME (the user is created if missing) and print it once."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="")
        parser.add_argument("--staff", action="store_true", help="make the user staff (import endpoints)")

    def handle(self, *args, username, name, staff, **options):
        user, _ = get_user_model().objects.get_or_create(username=username)
        if staff and not user.is_staff:
            user.is_staff = True
            user.save(update_fields=["is_staff"])
        _, raw = api_token_create(user=user, name=name)
        self.stdout.write(raw)
