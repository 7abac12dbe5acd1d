"""`manage.py runserver`: daphne's ASGI runserver on Malamar's host and port, and the same
refusal as `malamar` to serve other machines without a password, whatever address is given."""

from daphne.management.commands.runserver import Command as DaphneRunserver
from django.conf import settings
from django.core.management import CommandError

from core import startup
from core.auth import remote_access_refusal
from core.config import ensure_data_dir


class Command(DaphneRunserver):
    help = "Start the web server only (no worker) on Malamar's host and port."

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.default_addr = settings.CONFIG.host
        self.default_port = str(settings.CONFIG.port)

    def run(self, **options):
        refusal = remote_access_refusal(bind=self.addr)
        if refusal:
            raise CommandError(refusal)
        startup.bind_checked()
        ensure_data_dir(settings.CONFIG)
        super().run(**options)
