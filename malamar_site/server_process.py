"""The process that `malamar` starts: daphne's own command line, with its access log written
through Malamar's logging (the `text`/`json` format, one line per request, long paths cut), then
a prompt exit (see core.prompt_exit) once daphne has stopped.

With `--with-worker` (what `malamar` passes) the worker runs in a thread of this same process:
Django, the models and the services are loaded once, not twice (~60 MB less than a separate
worker process). SIGTERM / Ctrl-C stop both; a worker that fails stops the server, and the
process exits 1. `manage.py runserver` and `manage.py runworker` stay two processes."""

import logging
import sys
import threading
from pathlib import Path

from core.prompt_exit import exit_now

access_log = logging.getLogger("malamar.access")
log = logging.getLogger(__name__)
MAX_LOGGED_PATH = 200
WITH_WORKER = "--with-worker"


def log_action(protocol: str, action: str, details: dict) -> None:
    """daphne's action logger: HTTP requests as they complete."""
    if protocol != "http" or action != "complete":
        return
    path = details.get("path") or ""
    if len(path) > MAX_LOGGED_PATH:
        path = path[:MAX_LOGGED_PATH] + "…"
    access_log.info(
        f"{details.get('method')} {path} {details.get('status')}",
        extra={"client": details.get("client"), "bytes": details.get("size")},
    )


class WorkerThread:
    """The worker beside the server: started once the application is loaded, asked to stop when
    the reactor shuts down, and stopping the reactor itself if it fails."""

    def __init__(self):
        from django.conf import settings

        from worker.loop import Worker

        self.worker = Worker(poll_interval=settings.CONFIG.runner_poll_interval / 1000)
        self.thread = threading.Thread(target=self._serve, name="worker")
        self.failed = False

    def start(self) -> None:
        from twisted.internet import reactor

        reactor.addSystemEventTrigger("before", "shutdown", self.request_stop)
        self.thread.start()

    def request_stop(self) -> None:
        self.worker.request_stop()

    def join(self) -> None:
        self.request_stop()  # daphne may have stopped before the reactor ran
        self.worker.wait_stopped(self.thread)  # (not for ever: the database may hang)

    def _serve(self) -> None:
        from worker.loop import AlreadyRunning

        try:
            self.worker.serve_forever()
            return
        except AlreadyRunning as exc:
            print(exc, file=sys.stderr, flush=True)
        except Exception:
            log.exception("The worker failed")
        self.failed = True
        from twisted.internet import reactor

        reactor.callFromThread(_stop_reactor)


def _stop_reactor() -> None:
    from twisted.internet import reactor

    if reactor.running:
        reactor.stop()


def main() -> None:
    import daphne
    from daphne.cli import CommandLineInterface
    from daphne.server import Server

    with_worker = WITH_WORKER in sys.argv
    args = [arg for arg in sys.argv[1:] if arg != WITH_WORKER]
    worker = None

    class LoggedServer(Server):
        def __init__(self, *args, action_logger=None, **kwargs):
            super().__init__(*args, action_logger=log_action if action_logger else None, **kwargs)

        def run(self):
            if worker:
                worker.start()
            super().run()

    cli = CommandLineInterface()
    cli.server_class = LoggedServer
    # asgi.py reads the bind address from daphne's command line (core.startup).
    sys.argv = [str(Path(daphne.__file__).parent / "__main__.py"), *args]
    code = 0
    try:
        if with_worker:
            import malamar_site.asgi  # noqa: F401  (Django set up, before the worker)

            worker = WorkerThread()
        cli.run(args)
    except SystemExit as exc:  # e.g. refused to serve without a password: keep its code
        code = exc.code if isinstance(exc.code, int) else 1
    if worker:
        worker.join()
        code = code or (1 if worker.failed else 0)
    exit_now(code)


if __name__ == "__main__":
    main()
