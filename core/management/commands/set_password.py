import getpass
import sys

from django.core.management.base import BaseCommand, CommandError

from core import config
from core.auth import password_set
from core.errors import ValidationFailed


class Command(BaseCommand):
    help = "Protect the web UI, the API and the event stream with a password."

    def add_arguments(self, parser):
        parser.add_argument(
            "--stdin", action="store_true", help="read the password from standard input"
        )
        parser.add_argument("--remove", action="store_true", help="remove the password")

    def handle(self, *args, **options):
        if options["remove"]:
            password_set(raw=None)
            self.stdout.write("Password removed: Malamar is local-only again.")
            return
        if options["stdin"] or config.read("password_stdin"):
            raw = sys.stdin.readline().rstrip("\n")
        else:
            raw = getpass.getpass("New password: ")
            if getpass.getpass("Repeat it: ") != raw:
                raise CommandError("The two passwords differ; nothing changed.")
        try:
            password_set(raw=raw)
        except ValidationFailed as exc:
            raise CommandError(exc.message) from None
        self.stdout.write("Password set. Sign in at /login/; restart Malamar if it is running.")
