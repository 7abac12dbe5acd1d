"""The worker process: task runner, chat replies, stop watcher and jobs.

The loop is a few steps, over and over (`step`): sleep until woken or the next tick, signal the
runs that were stopped, start the work that may start (a thread per busy workspace, a thread
per chat reply), run the jobs that are due (usage limits, cleanup, health checks).

One thread per busy workspace runs that workspace's tasks one at a time (or up to its
"parallel tasks" threads with branch per task); any number of workspaces run in parallel;
every chat reply gets a thread of its own. A workspace thread with nothing left waits idle,
keeping its database connection, for the next workspace (IDLE_RUNNERS). Every running run (a
task pass or a chat reply) is in one map, watched by one stop watcher. The main loop sleeps
on a Unix socket the server pokes after each commit (new work starts in milliseconds) with the
poll interval as the fallback. The stop watcher looks at the running items at each wake-up
(every stop request, delete or move out of In Progress commits with a wake-up) and at each
poll; a run it stops is woken at once (process.RunStop), so a hundred quiet runs cost no
polling at all.

Several workers (DESIGN "Scale-out", PostgreSQL only; SQLite keeps its one worker per data dir,
held by a file lock): this worker's row, heartbeat, peers, take-overs and the recovery of dead
workers' runs are worker.membership's. Each worker runs at most its capacity, claims
under its id (a workspace's claims lock its row, SKIP LOCKED) and only work whose CLIs are
healthy here unless no live worker has them. Wake-ups come by LISTEN/NOTIFY.
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
from queue import Empty, SimpleQueue

from django.conf import settings
from django.db import connection

from agents.first_launch import seed_sample_workspace_if_first_launch
from chats.models import ChatQueueItem
from core.wake import (
    ANYTHING,
    TASKS,
    bind_datagram_socket,
    read_datagrams,
    socket_path,
    uses_notify,
)
from runner.clis import CliType
from runner.models import CliHealth, CliHealthStatus
from runner.models import Worker as WorkerRow
from runner.services import workers_forget
from tasks.models import QueueStatus, TaskQueueItem
from worker import health, jobs, pickup, process
from worker.limits import LimitWatch
from worker.listener import WorkListener
from worker.malloc import limit_malloc_arenas, release_free_memory
from worker.membership import Membership
from worker.pipeline import ChatReply, TaskPass

log = logging.getLogger(__name__)
SHUTDOWN_GRACE_SECONDS = 1.2
# From a stop request to the end of stop(), whatever the database does: a PostgreSQL that hangs
# (or a network that drops its packets) must not keep a stopping worker alive. What is left
# undone (handing the runs back) the next start or another worker does.
STOP_DEADLINE_SECONDS = 1.6
CLEANUP_EVERY = 24 * 3600
HEALTH_EVERY = 5 * 60
LIMITS_EVERY = 1.0
# A runner thread whose workspace has nothing left waits this long, keeping its database
# connection, for the next workspace to run (a new thread opens a new connection: ~1-2 ms of
# every pickup); at most this many wait.
IDLE_RUNNERS = 2
IDLE_RUNNER_SECONDS = 300.0


class AlreadyRunning(RuntimeError):
    pass


def _closing(work):
    """`work` in a thread of its own, which closes its database connection when done."""

    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    return run


def _reuse_connection() -> None:
    """A kept connection before its next use, checked as Django checks one between two
    requests: PostgreSQL's is closed when too old or broken (conn_max_age, health checks);
    SQLite's (kept for good) only when broken."""
    if connection.settings_dict["CONN_MAX_AGE"]:
        connection.close_if_unusable_or_obsolete()
    elif connection.errors_occurred and connection.connection and not connection.is_usable():
        connection.close()


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


# A run's kind → its queue and the pipeline owner that runs one of its items.
QUEUES = {"task": TaskQueueItem, "chat": ChatQueueItem}
OWNERS = {"task": TaskPass, "chat": ChatReply}


class Worker:
    def __init__(
        self,
        *,
        poll_interval: float,
        limits: LimitWatch | None = None,
        capacity: int | None = None,
        heartbeat: float | None = None,
        stale_after: float | None = None,
        idle_runners: int = IDLE_RUNNERS,
        idle_runner_seconds: float = IDLE_RUNNER_SECONDS,
        health_at_start: bool = True,
    ):
        """`health_at_start`: check every CLI (with the real prompt) as it starts (DESIGN.md
        "Health checks"); the periodic and requested checks run either way."""
        # Before the worker's threads exist (the process's too, with `--with-worker`).
        limit_malloc_arenas()
        config = settings.CONFIG
        self.poll_interval = poll_interval
        self.capacity = config.capacity if capacity is None else capacity  # 0: no limit
        self.membership = Membership(
            capacity=self.capacity,
            heartbeat=heartbeat or config.worker_heartbeat,
            stale_after=stale_after or config.worker_stale_after,
            healthy_clis=lambda: self.healthy_clis(),
            drop_runs=lambda why: self.drop_runs(why),
            kick=lambda: self.kick(),
        )
        self.reserved = 0  # runs claimed or being claimed (capacity)
        self.lock_handle = None  # SQLite: the data directory's worker lock, held while we run
        self.listener: WorkListener | None = None
        self.beats: threading.Thread | None = None
        self.limits = limits or LimitWatch()
        self.next_limits = 0.0
        self.shutdown = threading.Event()
        self.stop_requested_at: float | None = None  # monotonic, see request_stop
        self.lock = threading.Lock()
        self.workspaces: dict[str, set[threading.Thread]] = {}  # workspace id → its runners
        # Runner threads waiting for a workspace to run: (thread, where its next one is put).
        self.idle_runners: list[tuple[threading.Thread, SimpleQueue]] = []
        self.max_idle_runners, self.idle_runner_seconds = idle_runners, idle_runner_seconds
        self.runs: dict[tuple[str, str], process.RunStop] = {}  # (kind, item id) → its stop
        self.chat_threads: set[threading.Thread] = set()
        self.sock: socket.socket | None = None
        self.kick_r, self.kick_w = os.pipe()
        self.next_cleanup = 0.0
        self.next_poll = 0.0  # when to look for new work without a wake-up
        self.next_health = 0.0
        self.health = health.HealthChecks()
        self.health_at_start = health_at_start
        self.health_requests: dict = {}  # CLI → the check request already handed to self.health

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        shared = pickup.shared_database()
        if not shared:  # SQLite: one worker per data directory; older rows are dead workers
            self.lock_handle = acquire_lock()
            workers_forget(worker_ids=WorkerRow.objects.values_list("id", flat=True))
        self.sock = bind_datagram_socket(socket_path())
        if uses_notify():
            self.listener = WorkListener.connect()
        seed_sample_workspace_if_first_launch()
        self.membership.register()
        recovered = self.membership.recover_dead_workers()
        self.beats = threading.Thread(
            target=self.membership.beat_forever,
            args=(self.shutdown,),
            name="malamar-heartbeat",
            daemon=True,
        )
        self.beats.start()
        log.info(
            "Worker started",
            extra={
                "data_dir": str(settings.DATA_DIR),
                "recovered_items": recovered,
                "worker_id": self.worker_id,
                "capacity": self.capacity,
            },
        )
        if self.health_at_start:
            self.health.request(full_for=set(CliType.values) | health.custom_keys())
        self.next_health = time.monotonic() + HEALTH_EVERY

    def request_stop(self) -> None:
        """Asked to stop (SIGTERM, Ctrl-C, the server stopping), from any thread but a signal
        handler's: every CLI (runs and health checks) is killed now, even while the main loop
        waits for a database that does not answer. serve_forever() then returns by itself."""
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
        self.shutdown.set()
        self.kick()
        self.health.stopping.set()
        with self.lock:
            stops = list(self.runs.values())
        for stop in stops:
            stop.set()

    def wait_stopped(self, thread: threading.Thread) -> bool:
        """Join `thread` (the one in serve_forever) until the stop deadline; False: it still
        waits for the database, the process should end without it."""
        started = self.stop_requested_at or time.monotonic()
        thread.join(timeout=max(0.0, started + STOP_DEADLINE_SECONDS + 0.2 - time.monotonic()))
        self.kill_left_running()
        if thread.is_alive():
            log.warning("The database did not answer while stopping: the worker stops without it")
            return False
        return True

    def kill_left_running(self) -> None:
        """The CLIs of runs whose thread did not end in time: each was asked to stop, but a
        thread stuck in the database cannot kill its CLI, and the process is about to end."""
        with self.lock:
            stops = list(self.runs.values())
        if sum(stop.kill_followed() for stop in stops):
            log.warning("A run did not end in time while stopping: its CLI was killed")

    def stop(self) -> None:
        """Stop picking up, kill every running CLI, give threads a moment, then return."""
        self.request_stop()
        with self.lock:
            threads = [t for runners in self.workspaces.values() for t in runners]
            threads += list(self.chat_threads)
            for thread, jobs in self.idle_runners:  # they end (closing their connections)
                jobs.put(None)
                threads.append(thread)
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.kill_left_running()
        self.health.stop(timeout=max(0.0, deadline - time.monotonic()))
        process.spares.clear()  # the gates started ahead for the next runs
        if self.beats is not None:
            self.beats.join(timeout=max(0.0, deadline - time.monotonic()))
        self._before_the_deadline(self.membership.leave)
        if self.listener is not None:
            self.listener.close()
        if self.sock:
            self.sock.close()
            with contextlib.suppress(OSError):
                socket_path().unlink()
        if self.lock_handle is not None:  # (not left to the garbage collector)
            self.lock_handle.close()
            self.lock_handle = None

    def serve_forever(self) -> None:
        self.start()
        try:
            while not self.shutdown.is_set():
                self.step()
        finally:
            self.stop()

    # main loop -------------------------------------------------------------------------
    def step(self) -> None:
        woken = self._wait_for_wake()
        if self.shutdown.is_set():
            return
        try:
            self.watch_stops()
            # New work and stop requests come with a wake-up (the server pokes after each
            # commit, a finished workspace thread kicks) or are found by the poll. A wake-up
            # for a queued task only looks for tasks: the task's thread starts it at once,
            # not beside the chat and job queries (they wait for the next other wake-up, or
            # the poll).
            now = time.monotonic()
            if woken == {TASKS} and now < self.next_poll:
                self.spawn_workspaces()
            elif woken or now >= self.next_poll:
                self.next_poll = now + self.poll_interval
                self.spawn_workspaces()
                self.spawn_chats()
                self.run_jobs()
        except Exception:
            log.exception("Worker loop step failed; continuing")
            connection.close()
            time.sleep(0.2)

    def _wait_for_wake(self) -> set[str]:
        """Sleep until a wake-up or the next poll; what woke us (core.wake: TASKS, ANYTHING;
        empty: nothing did)."""
        timeout = max(0.0, min(self.poll_interval, self.next_poll - time.monotonic()))
        sources = [self.kick_r] + ([self.sock] if self.sock else [])
        if self.listener is not None and self.listener.fileno() is not None:
            sources.append(self.listener)
        ready, _, _ = select.select(sources, [], [], timeout)
        woken = set()
        for source in ready:
            said = {ANYTHING}  # (unless it says what it is for)
            with contextlib.suppress(OSError):
                if source is self.kick_r:
                    os.read(self.kick_r, 4096)
                elif source is self.listener:
                    said = self.listener.drain() or said
                else:
                    said = read_datagrams(source) or said
            woken |= said
        return woken

    @property
    def worker_id(self) -> str | None:
        """Our Worker row's id, once registered (Membership)."""
        return self.membership.worker_id

    def _before_the_deadline(self, work) -> None:
        """Database work of a clean stop, given up at the stop deadline (a hung database)."""
        thread = threading.Thread(target=_closing(work), name="malamar-stopping", daemon=True)
        thread.start()
        thread.join(
            timeout=max(0.1, self.stop_requested_at + STOP_DEADLINE_SECONDS - time.monotonic())
        )
        if thread.is_alive():
            log.warning("The database did not answer: the worker's runs are recovered later")

    def healthy_clis(self) -> frozenset[str]:
        """The CLIs this worker's own health checks found usable ("not checked yet" counts)."""
        found = self.health.results
        unusable = {CliHealthStatus.UNHEALTHY}
        return frozenset(cli for cli in CliType.values if found.get(cli) not in unusable)

    def drop_runs(self, why: str) -> None:
        """Kill every run we have (their items are another worker's now): the pipeline's
        ownership checks make sure none of them writes anything more."""
        with self.lock:
            stops = list(self.runs.values())
        if stops:
            log.warning("Dropping this worker's runs", extra={"why": why, "runs": len(stops)})
        for stop in stops:
            stop.set()

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
            wanted = queue.objects.wanted_ids(ids, worker_id=self.worker_id)
            for item_id in ids:
                stop = running[(kind, item_id)]
                if item_id not in wanted and not stop.is_set():
                    log.info("Stopping a run", extra={"item": item_id})
                    stop.set()

    def spawn_workspaces(self) -> None:
        """A runner thread per task that may start, up to the workspace's parallel limit (and
        this worker's capacity)."""
        found = pickup.startable()
        waiting = {workspace_id: n for workspace_id, (n, _limit) in found.items()}
        limits = {workspace_id: limit for workspace_id, (_n, limit) in found.items()}
        if waiting and pickup.shared_database():
            waiting = self.membership.ours_to_run(waiting, limits)
        with self.lock:
            for workspace_id, startable in waiting.items():
                runners = self.workspaces.setdefault(workspace_id, set())
                limit = limits.get(workspace_id, 1)
                for _ in range(min(startable, limit - len(runners), self._room())):
                    runners.add(self._runner_for(workspace_id, limit))
                if not runners:
                    self.workspaces.pop(workspace_id, None)

    def _room(self) -> int:
        """How many more runs this worker may start (inside self.lock)."""
        if not self.capacity:
            return 1 << 30
        threads = sum(len(runners) for runners in self.workspaces.values())
        return max(0, self.capacity - threads - len(self.chat_threads))

    def _reserve(self) -> bool:
        """A slot of this worker's capacity for one claim (released when its run ends)."""
        with self.lock:
            if self.capacity and self.reserved >= self.capacity:
                return False
            self.reserved += 1
            return True

    def _release(self) -> None:
        with self.lock:
            self.reserved -= 1

    def _runner_for(self, workspace_id: str, limit: int) -> threading.Thread:
        """A runner thread for the workspace (inside self.lock): an idle one, else a new one."""
        name = f"malamar-ws-{workspace_id}"
        if self.idle_runners:
            thread, jobs = self.idle_runners.pop()
            thread.name = name
            jobs.put((workspace_id, limit))
            return thread
        thread = threading.Thread(
            target=self._workspace_thread, args=(workspace_id, limit), name=name, daemon=True
        )
        thread.start()
        return thread

    def _workspace_thread(self, workspace_id: str, limit: int) -> None:
        """Run workspaces, one after another: this one, then the ones handed to it while it
        waits idle (its database connection kept for them); ends when none comes."""
        jobs: SimpleQueue = SimpleQueue()
        job = (workspace_id, limit)
        try:
            while job is not None:
                idle = self._run_workspace(*job, jobs)
                job = self._next_job(jobs) if idle else None
        finally:
            connection.close()

    def _next_job(self, jobs: SimpleQueue):
        """The next workspace handed to this idle runner, or None (it waited long enough, or
        the worker stops)."""
        try:
            job = jobs.get(timeout=self.idle_runner_seconds)
        except Empty:
            with self.lock:
                entry = next((e for e in self.idle_runners if e[1] is jobs), None)
                if entry is not None:  # (else one was handed to it as it gave up)
                    self.idle_runners.remove(entry)
                    return None
            job = jobs.get()
        if job is not None:
            _reuse_connection()
        return job

    def _run_workspace(self, workspace_id: str, limit: int, jobs: SimpleQueue) -> bool:
        """Claim and run the workspace's tasks until none is left for it; True: this runner
        waits idle for another workspace (`jobs`)."""
        idle = False
        try:
            while not self.shutdown.is_set() and self._reserve():
                try:
                    item = pickup.claim_next(workspace_id, limit=limit, worker_id=self.worker_id)
                    if item is not None:
                        self._run("task", item, self._register("task", item))
                finally:
                    self._release()
                if item is None:
                    break
        except Exception:
            log.exception("Workspace runner failed", extra={"workspace_id": workspace_id})
            connection.close()
        finally:
            release_free_memory()
            with self.lock:
                runners = self.workspaces.get(workspace_id, set())
                runners.discard(threading.current_thread())
                if not runners:
                    self.workspaces.pop(workspace_id, None)
                idle = not self.shutdown.is_set() and (
                    len(self.idle_runners) < self.max_idle_runners
                )
                if idle:
                    self.idle_runners.append((threading.current_thread(), jobs))
            self.kick()  # new work may have arrived while this thread was finishing
        return idle

    def spawn_chats(self) -> None:
        """Every queued chat message gets its own thread: chats never wait for each other
        (up to this worker's capacity)."""
        if not pickup.chats_queued():
            return
        avoid = self.membership.left_to_others() if pickup.shared_database() else frozenset()
        while not self.shutdown.is_set() and self._reserve():
            item = pickup.claim_next_chat(worker_id=self.worker_id, avoid=avoid)
            if item is None:
                self._release()
                return
            thread = threading.Thread(
                target=self._chat_thread,
                args=(item, self._register("chat", item)),
                name=f"malamar-chat-{item.id}",
                daemon=True,
            )
            with self.lock:
                self.chat_threads.add(thread)
            thread.start()

    def _chat_thread(self, item, stop: process.RunStop) -> None:
        try:
            self._run("chat", item, stop)
        finally:
            with self.lock:
                self.chat_threads.discard(threading.current_thread())
            self._release()
            connection.close()
            release_free_memory()
            if self.capacity:
                self.kick()  # a slot is free: look for waiting work now

    def _register(self, kind: str, item) -> process.RunStop:
        """A claimed item enters the map of running runs (so stop() and the watcher see it)."""
        stop = process.RunStop()
        with self.lock:
            self.runs[(kind, item.id)] = stop
        return stop

    def _run(self, kind: str, item, stop: process.RunStop) -> None:
        """Run one claimed item through the pipeline; it leaves the map when done."""
        try:
            OWNERS[kind](item, stop=stop, shutdown=self.shutdown).run()
        except Exception:
            log.exception("Run failed unexpectedly", extra={"item": item.id, "kind": kind})
            if not self.shutdown.is_set():
                QUEUES[kind].objects.finish(item, QueueStatus.FAILED)
        finally:
            with self.lock:
                self.runs.pop((kind, item.id), None)

    def run_jobs(self) -> None:
        now = time.monotonic()
        if now >= self.next_limits:  # usage limits: lift at the reset time, probe when due
            self.next_limits = now + LIMITS_EVERY
            self.limits.tick()
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
