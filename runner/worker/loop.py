"""The worker process: task runner, chat replies, stop watcher, startup recovery and jobs.

One thread per busy workspace runs that workspace's tasks one at a time (or up to its
"parallel tasks" threads with branch per task); any number of workspaces run in parallel;
every chat reply gets a thread of its own. Every running run (a
task pass or a chat reply) is in one map, watched by one stop watcher. The main loop sleeps on
a Unix socket the server pokes after each commit (new work starts in milliseconds) with the
poll interval as the fallback, and checks the running items every 100 ms for stop requests.
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

from agents.models import CliType
from chats.models import ChatQueueItem
from core.wake import socket_path
from runner.models import CliHealth
from runner.services import agent_runs_close_interrupted
from runner.worker import health, jobs, pickup
from runner.worker.pipeline import ChatReply, TaskPass
from runner.worker.process import kill_tree
from tasks.models import QueueStatus, TaskQueueItem
from workspaces.first_launch import seed_sample_workspace_if_first_launch

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
    agent_runs_close_interrupted()
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


# A run's kind → its queue and the pipeline owner that runs one of its items.
QUEUES = {"task": TaskQueueItem, "chat": ChatQueueItem}
OWNERS = {"task": TaskPass, "chat": ChatReply}


class Worker:
    def __init__(self, *, poll_interval: float):
        self.poll_interval = poll_interval
        self.shutdown = threading.Event()
        self.lock = threading.Lock()
        self.workspaces: dict[str, set[threading.Thread]] = {}  # workspace id → its runners
        self.runs: dict[tuple[str, str], threading.Event] = {}  # (kind, item id) → stop event
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
        self.health.request(full_for=set(CliType.values) | health.custom_keys())
        self.next_health = time.monotonic() + HEALTH_EVERY

    def stop(self) -> None:
        """Stop picking up, kill every running CLI, give threads a moment, then return."""
        self.shutdown.set()
        with self.lock:
            stops = list(self.runs.values())
            threads = [t for runners in self.workspaces.values() for t in runners]
            threads += list(self.chat_threads)
        for stop in stops:
            stop.set()
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.health.stop(timeout=max(0.0, deadline - time.monotonic()))
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
            self.spawn_workspaces()
            self.spawn_chats()
            self.run_jobs()
        except Exception:
            log.exception("Worker loop step failed; continuing")
            connection.close()
            time.sleep(0.2)

    def _wait_for_wake(self) -> None:
        with self.lock:
            busy = bool(self.runs)
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
        """Signal every run (task pass or chat reply) whose item was stopped or deleted, or
        whose task left Todo/In Progress: one query per kind that runs."""
        with self.lock:
            running = dict(self.runs)
        for kind, queue in QUEUES.items():
            ids = [item_id for run_kind, item_id in running if run_kind == kind]
            if not ids:
                continue
            wanted = queue.objects.still_wanted(ids)
            for item_id in ids:
                stop = running[(kind, item_id)]
                if item_id not in wanted and not stop.is_set():
                    log.info("Stopping a run", extra={"item": item_id})
                    stop.set()

    def spawn_workspaces(self) -> None:
        """A runner thread per task that may start, up to the workspace's parallel limit."""
        waiting = pickup.workspaces_with_work()
        limits = pickup.parallel_limits(waiting) if waiting else {}
        with self.lock:
            for workspace_id, startable in waiting.items():
                runners = self.workspaces.setdefault(workspace_id, set())
                limit = limits.get(workspace_id, 1)
                for _ in range(min(startable, limit - len(runners))):
                    thread = threading.Thread(
                        target=self._workspace_thread,
                        args=(workspace_id, limit),
                        name=f"malamar-ws-{workspace_id}",
                        daemon=True,
                    )
                    runners.add(thread)
                    thread.start()

    def _workspace_thread(self, workspace_id: str, limit: int) -> None:
        try:
            while not self.shutdown.is_set():
                item = pickup.claim_next(workspace_id, limit=limit)
                if item is None:
                    break
                self._run("task", item, self._register("task", item))
        except Exception:
            log.exception("Workspace runner failed", extra={"workspace_id": workspace_id})
        finally:
            with self.lock:
                runners = self.workspaces.get(workspace_id, set())
                runners.discard(threading.current_thread())
                if not runners:
                    self.workspaces.pop(workspace_id, None)
            connection.close()
            self.kick()  # new work may have arrived while this thread was finishing

    def spawn_chats(self) -> None:
        """Every queued chat message gets its own thread: chats never wait for each other."""
        if not pickup.chats_queued():
            return
        while not self.shutdown.is_set() and (item := pickup.claim_next_chat()):
            thread = threading.Thread(
                target=self._chat_thread,
                args=(item, self._register("chat", item)),
                name=f"malamar-chat-{item.id}",
                daemon=True,
            )
            with self.lock:
                self.chat_threads.add(thread)
            thread.start()

    def _chat_thread(self, item, stop: threading.Event) -> None:
        try:
            self._run("chat", item, stop)
        finally:
            with self.lock:
                self.chat_threads.discard(threading.current_thread())
            connection.close()

    def _register(self, kind: str, item) -> threading.Event:
        """A claimed item enters the map of running runs (so stop() and the watcher see it)."""
        stop = threading.Event()
        with self.lock:
            self.runs[(kind, item.id)] = stop
        return stop

    def _run(self, kind: str, item, stop: threading.Event) -> None:
        """Run one claimed item through the pipeline; it leaves the map when done."""
        try:
            OWNERS[kind](item, stop=stop, shutdown=self.shutdown).run()
        except Exception:
            log.exception("Run failed unexpectedly", extra={"item": item.id, "kind": kind})
            if not self.shutdown.is_set():
                QUEUES[kind].objects.finish(item.id, QueueStatus.FAILED)
        finally:
            with self.lock:
                self.runs.pop((kind, item.id), None)

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
            if new >= set(CliType.values):
                self.next_health = now + HEALTH_EVERY
        if now >= self.next_health:
            self.next_health = now + HEALTH_EVERY
            self.health.request(full_for=health.needs_full_check())
