"""The worker process: task runner, stop watcher, startup recovery and scheduled jobs.

One thread per busy workspace runs that workspace's tasks one at a time; any number of
workspaces run in parallel. The main loop sleeps on a Unix socket the server pokes after each
commit (new work starts in milliseconds) with the poll interval as the fallback, and checks the
running items every 100 ms for stop requests.
"""

import contextlib
import fcntl
import logging
import os
import select
import socket
import threading
import time
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from chats.models import ChatQueueItem
from core.first_launch import seed_sample_workspace_if_first_launch
from core.wake import socket_path
from runner import chat_processor, health, jobs, pickup, task_loop
from runner.models import CliHealth
from runner.process import kill_tree
from runner.recorder import close_interrupted_runs
from tasks.models import QueueStatus, TaskQueueItem

log = logging.getLogger(__name__)
STOP_WATCH_SECONDS = 0.1
SHUTDOWN_GRACE_SECONDS = 1.2
CLEANUP_EVERY = 24 * 3600
HEALTH_EVERY = 5 * 60


class AlreadyRunning(RuntimeError):
    pass


def lock_path() -> Path:
    return Path(settings.DATA_DIR) / "worker.lock"


def acquire_lock():
    """Exactly one worker per data directory (held until the process exits)."""
    handle = open(lock_path(), "a+")  # noqa: SIM115 - held for the life of the worker
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        pid = handle.read().strip() or "unknown"
        handle.close()
        raise AlreadyRunning(
            f"Another Malamar worker (pid {pid}) is already running for {settings.DATA_DIR}."
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def worker_running() -> bool:
    """For the server: is a worker holding the lock right now?"""
    try:
        with open(lock_path(), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def _bind_wake_socket() -> socket.socket | None:
    path = socket_path()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a stale socket from a previous worker (we hold the lock)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        log.warning("Wake socket unavailable; polling only", extra={"error": str(exc)})
        sock.close()
        return None
    sock.setblocking(False)
    return sock


def recover() -> int:
    """Kill CLIs a crashed worker left behind, then re-queue what was in progress."""
    close_interrupted_runs()
    recovered = 0
    for model in (TaskQueueItem, ChatQueueItem):
        for item in model.objects.filter(status=QueueStatus.IN_PROGRESS):
            if item.pid and item.pgid and item.process_started_at:
                killed = kill_tree(item.pid, pgid=item.pgid, create_time=item.process_started_at)
                if killed:
                    log.warning("Killed a leftover CLI", extra={"pid": item.pid, "item": item.id})
            recovered += _requeue(model, item)
    return recovered


def _requeue(model, item) -> int:
    """An interrupted item runs again, unless the user stopped it or a newer one is queued."""
    superseded = model is TaskQueueItem and (
        TaskQueueItem.objects.queued().filter(task_id=item.task_id).exists()
    )
    model.objects.requeue(item.id, stopped=item.stop_requested_at is not None or superseded)
    return 1


def _signal_unwanted(running: dict[str, threading.Event], still_wanted: set[str]) -> None:
    """Set the stop event of every running item that is no longer wanted."""
    for item_id, stop in running.items():
        if item_id not in still_wanted and not stop.is_set():
            log.info("Stopping a run", extra={"item": item_id})
            stop.set()


class Worker:
    def __init__(self, *, poll_interval: float):
        self.poll_interval = poll_interval
        self.shutdown = threading.Event()
        self.lock = threading.Lock()
        self.workspaces: dict[str, threading.Thread] = {}
        self.runs: dict[str, threading.Event] = {}  # task queue item id → stop event
        self.chat_runs: dict[str, threading.Event] = {}  # chat queue item id → stop event
        self.chat_threads: set[threading.Thread] = set()
        self.sock: socket.socket | None = None
        self.kick_r, self.kick_w = os.pipe()
        self.next_cleanup = 0.0
        self.next_health = 0.0
        self.health = health.HealthChecks()
        self.health_requests: dict = {}  # CLI → the check request already handed to self.health

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self.lock_handle = acquire_lock()
        self.sock = _bind_wake_socket()
        seed_sample_workspace_if_first_launch()
        recovered = recover()
        log.info(
            "Worker started",
            extra={"data_dir": str(settings.DATA_DIR), "recovered_items": recovered},
        )
        self.health.request(full_for=set(health.CliType.values))
        self.next_health = time.monotonic() + HEALTH_EVERY

    def stop(self) -> None:
        """Stop picking up, kill every running CLI, give threads a moment, then return."""
        self.shutdown.set()
        with self.lock:
            stops = list(self.runs.values()) + list(self.chat_runs.values())
            threads = list(self.workspaces.values()) + list(self.chat_threads)
        for stop in stops:
            stop.set()
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self.sock:
            self.sock.close()
            with contextlib.suppress(OSError):
                socket_path().unlink()

    def serve_forever(self) -> None:
        self.start()
        try:
            while not self.shutdown.is_set():
                self.step()
        finally:
            self.stop()

    # main loop -------------------------------------------------------------------------
    def step(self) -> None:
        self._wait_for_wake()
        if self.shutdown.is_set():
            return
        try:
            self.watch_stops()
            self.watch_chat_stops()
            self.spawn_workspaces()
            self.spawn_chats()
            self.run_jobs()
        except Exception:
            log.exception("Worker loop step failed; continuing")
            connection.close()
            time.sleep(0.2)

    def _wait_for_wake(self) -> None:
        with self.lock:
            busy = bool(self.runs or self.chat_runs)
        timeout = STOP_WATCH_SECONDS if busy else self.poll_interval
        sources = [self.kick_r] + ([self.sock] if self.sock else [])
        ready, _, _ = select.select(sources, [], [], timeout)
        for source in ready:
            with contextlib.suppress(OSError):
                if source is self.kick_r:
                    os.read(self.kick_r, 4096)
                else:
                    while source.recv(64):
                        pass

    def kick(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.kick_w, b"k")

    def watch_stops(self) -> None:
        """Signal runs whose item was stopped or deleted, or whose task left Todo/In Progress.

        (Right after a claim the task is still Todo for a moment, so Todo counts as wanted.)
        """
        with self.lock:
            running = dict(self.runs)
        if not running:
            return
        _signal_unwanted(running, TaskQueueItem.objects.still_wanted(running))

    def spawn_workspaces(self) -> None:
        waiting = pickup.workspaces_with_work()
        with self.lock:
            idle = waiting - set(self.workspaces)
            for workspace_id in idle:
                thread = threading.Thread(
                    target=self._workspace_thread,
                    args=(workspace_id,),
                    name=f"malamar-ws-{workspace_id}",
                    daemon=True,
                )
                self.workspaces[workspace_id] = thread
                thread.start()

    def _workspace_thread(self, workspace_id: str) -> None:
        try:
            while not self.shutdown.is_set():
                item = pickup.claim_next(workspace_id)
                if item is None:
                    break
                self._run_item(item)
        except Exception:
            log.exception("Workspace runner failed", extra={"workspace_id": workspace_id})
        finally:
            with self.lock:
                self.workspaces.pop(workspace_id, None)
            connection.close()
            self.kick()  # new work may have arrived while this thread was finishing

    def _run_item(self, item) -> None:
        stop = threading.Event()
        with self.lock:
            self.runs[item.id] = stop
        try:
            task_loop.run_pass(item, stop=stop, shutdown=self.shutdown)
        except Exception:
            log.exception("Task pass failed unexpectedly", extra={"item": item.id})
            if not self.shutdown.is_set():
                TaskQueueItem.objects.filter(id=item.id, status=QueueStatus.IN_PROGRESS).update(
                    status=QueueStatus.FAILED, updated_at=timezone.now()
                )
        finally:
            with self.lock:
                self.runs.pop(item.id, None)

    def watch_chat_stops(self) -> None:
        """Signal chat runs that were cancelled or whose chat was deleted."""
        with self.lock:
            running = dict(self.chat_runs)
        if not running:
            return
        _signal_unwanted(running, ChatQueueItem.objects.still_wanted(running))

    def spawn_chats(self) -> None:
        """Every queued chat message gets its own thread: chats never wait for each other."""
        if not chat_processor.has_queued():
            return
        while not self.shutdown.is_set() and (item := chat_processor.claim_next()):
            stop = threading.Event()
            thread = threading.Thread(
                target=self._chat_thread, args=(item, stop), name=f"malamar-chat-{item.id}"
            )
            thread.daemon = True
            with self.lock:
                self.chat_runs[item.id] = stop
                self.chat_threads.add(thread)
            thread.start()

    def _chat_thread(self, item, stop: threading.Event) -> None:
        try:
            chat_processor.process_item(item, stop=stop, shutdown=self.shutdown)
        except Exception:
            log.exception("Chat processing failed unexpectedly", extra={"item": item.id})
            if not self.shutdown.is_set():
                ChatQueueItem.objects.filter(id=item.id, status=QueueStatus.IN_PROGRESS).update(
                    status=QueueStatus.FAILED, updated_at=timezone.now()
                )
        finally:
            with self.lock:
                self.chat_runs.pop(item.id, None)
                self.chat_threads.discard(threading.current_thread())
            connection.close()

    def run_jobs(self) -> None:
        now = time.monotonic()
        if now >= self.next_cleanup:
            self.next_cleanup = now + CLEANUP_EVERY
            jobs.cleanup()
        # Checks the server asked for (Refresh, Test, saved CLI settings): each request once;
        # the check clears it when done (a request made during a check stays for the next).
        requested = dict(
            CliHealth.objects.filter(refresh_requested_at__isnull=False).values_list(
                "cli_type", "refresh_requested_at"
            )
        )
        new = {cli for cli, at in requested.items() if self.health_requests.get(cli) != at}
        self.health_requests = requested
        if new:
            self.health.request(full_for=new, clis=new)
            if new >= set(health.CliType.values):
                self.next_health = now + HEALTH_EVERY
        if now >= self.next_health:
            self.next_health = now + HEALTH_EVERY
            self.health.request(full_for=health.needs_full_check())
