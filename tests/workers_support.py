"""Several workers for the scale-out tests (DESIGN "Scale-out"): `Worker` loops in threads of
the test process, each with its own database connections (so on PostgreSQL they claim
concurrently, as processes on several machines would), and the database's URL for a real
`runworker` process."""

import contextlib
import os
import threading

from django.db import connection

from tests import databases
from tests.live import wait_until
from worker.loop import Worker

postgres_only = databases.postgres_only(
    "several workers share PostgreSQL (MALAMAR_TEST_DATABASE=postgres)"
)


class WorkerThread:
    """One worker's main loop in a thread; `stop()` waits for every thread it started."""

    def __init__(self, **options):
        options.setdefault("poll_interval", 0.2)
        self.worker = Worker(**options)
        self.thread = threading.Thread(target=self._serve, name="test-worker", daemon=True)

    def start(self) -> "WorkerThread":
        self.thread.start()
        wait_until(
            lambda: self.worker.worker_id or not self.thread.is_alive(),
            timeout=20,
            what="the worker's registration",
        )
        return self

    def _serve(self) -> None:
        try:
            self.worker.serve_forever()
        finally:
            connection.close()

    @property
    def id(self) -> str | None:
        return self.worker.worker_id

    def stop(self) -> None:
        worker = self.worker
        worker.shutdown.set()
        worker.kick()
        self.thread.join(timeout=30)
        with worker.lock:
            threads = list(worker.chat_threads)
            threads += [thread for thread, _jobs in worker.idle_runners]
            for runners in worker.workspaces.values():
                threads += list(runners)
        threads += list(worker.health.started)  # both lanes of health checks
        if worker.beats is not None:
            threads.append(worker.beats)
        for thread in threads:
            thread.join(timeout=30)
        assert not self.thread.is_alive(), "the worker did not stop"
        for fd in (worker.kick_r, worker.kick_w):
            with contextlib.suppress(OSError):
                os.close(fd)
