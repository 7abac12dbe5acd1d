import logging
import signal
import sys
import threading

from django.conf import settings
from django.core.management.base import BaseCommand

from core.config import ensure_data_dir
from core.prompt_exit import exit_now
from worker.loop import AlreadyRunning, Worker

log = logging.getLogger(__name__)


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

        stopping = threading.Event()

        def on_signal(signum, frame):
            stopping.set()  # (a signal handler may not take the worker's locks)

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        failed: list[str] = []  # why the worker ended by itself
        # The worker's loop runs in a thread, so that a stop request is handled here even while
        # the loop waits for a database that does not answer.
        thread = threading.Thread(
            target=self._serve, args=(worker, stopping, failed), name="malamar-worker"
        )
        thread.start()
        while not stopping.wait(1.0):
            pass
        if failed:
            self.stderr.write(failed[0])
            sys.exit(1)
        worker.request_stop()
        worker.wait_stopped(thread)
        exit_now(0)  # stopped (cleanly, or without a hung database): skip Python's slow teardown

    @staticmethod
    def _serve(worker: Worker, stopping: threading.Event, failed: list) -> None:
        try:
            worker.serve_forever()
        except AlreadyRunning as exc:
            failed.append(str(exc))
        except Exception:
            log.exception("The worker failed")
            failed.append("The worker failed (see the log)")
        finally:
            stopping.set()
