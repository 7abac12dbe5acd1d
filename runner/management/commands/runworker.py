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

    def add_arguments(self, parser):
        parser.add_argument(
            "--capacity",
            type=int,
            default=None,
            help="Most runs (task passes and chat replies) at once; 0: no limit"
            " (default: MALAMAR_WORKER_CAPACITY; no limit with SQLite, 4 with PostgreSQL)",
        )

    def handle(self, *args, **options):
        ensure_data_dir(settings.CONFIG)
        capacity = options["capacity"]
        if capacity is not None and capacity < 0:
            self.stderr.write("--capacity must be 0 (no limit) or more")
            sys.exit(2)
        worker = Worker(
            poll_interval=settings.CONFIG.runner_poll_interval / 1000, capacity=capacity
        )

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
