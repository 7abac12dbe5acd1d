import signal
import sys

from django.conf import settings
from django.core.management.base import BaseCommand

from core.config import ensure_data_dir
from core.prompt_exit import exit_now
from runner.worker.loop import AlreadyRunning, Worker


class Command(BaseCommand):
    help = "Run the Malamar worker: runs agents' CLIs on queued tasks and chats."
    requires_system_checks = []  # the checks are the web's (URLs, templates, admin): ~15 MB

    def handle(self, *args, **options):
        ensure_data_dir(settings.CONFIG)
        worker = Worker(poll_interval=settings.CONFIG.runner_poll_interval / 1000)

        def on_signal(signum, frame):
            worker.shutdown.set()
            worker.kick()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        try:
            worker.serve_forever()
        except AlreadyRunning as exc:
            self.stderr.write(str(exc))
            sys.exit(1)
        exit_now(0)  # stopped cleanly: skip Python's slow teardown
