"""The worker process: task runner, chat replies, stop watcher, startup recovery and jobs.

One thread per busy workspace runs that workspace's tasks one at a time (or up to its
"parallel tasks" threads with branch per task); any number of workspaces run in parallel;
every chat reply gets a thread of its own. Every running run (a
task pass or a chat reply) is in one map, watched by one stop watcher. The main loop sleeps on
a Unix socket the server pokes after each commit (new work starts in milliseconds) with the
poll interval as the fallback, and checks the running items every 100 ms for stop requests.

Several workers (DESIGN "Scale-out", PostgreSQL only; SQLite keeps its one worker per data dir,
held by a file lock): each has a `Worker` row, beats from a thread of its own, runs at most its
capacity, claims under its id (a workspace's claims lock its row, SKIP LOCKED) and only work
whose CLIs are healthy here unless no live worker has them; it takes over workers whose
heartbeat is stale and recovers their runs as a restart does, and drops its own runs when it
finds that it was taken over. Wake-ups come by LISTEN/NOTIFY.
"""

import contextlib
import fcntl
import logging
import os
import select
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path

import psutil
from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.first_launch import seed_sample_workspace_if_first_launch
from chats.models import ChatQueueItem
from core.version import VERSION
from core.wake import socket_path, uses_notify
from runner.clis import CliType
from runner.models import CliHealth, CliHealthStatus
from runner.models import Worker as WorkerRow
from runner.services import (
    agent_runs_close_interrupted,
    worker_heartbeat,
    worker_register,
    worker_retire,
    worker_take_over,
    workers_forget,
    workers_forget_taken_over,
)
from tasks.models import QueueStatus, TaskQueueItem
from worker import health, jobs, pickup
from worker.limits import LimitWatch
from worker.listener import WorkListener
from worker.malloc import limit_malloc_arenas, release_free_memory
from worker.pipeline import ChatReply, TaskPass
from worker.process import kill_tree

log = logging.getLogger(__name__)
STOP_WATCH_SECONDS = 0.1
SHUTDOWN_GRACE_SECONDS = 1.2
# From a stop request to the end of stop(), whatever the database does: a PostgreSQL that hangs
# (or a network that drops its packets) must not keep a stopping worker alive. What is left
# undone (handing the runs back) the next start or another worker does.
STOP_DEADLINE_SECONDS = 1.6
CLEANUP_EVERY = 24 * 3600
HEALTH_EVERY = 5 * 60
LIMITS_EVERY = 1.0


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


def recover(*, hostname: str, worker_id: str | None) -> int:
    """Kill CLIs a dead worker left behind, then re-queue what it was running: every run no
    live worker owns (at a start with SQLite, where the file lock makes us the only worker:
    every run in progress). Each item first becomes ours (`worker_id`, one conditional
    UPDATE: of several recoverers one wins, and a worker that was only paused can write
    nothing for it any more), then its CLI is killed, then it is re-queued. `hostname`: ours;
    a dead worker's CLIs on another machine are not ours to kill (that machine's worker kills
    them if it comes back)."""
    agent_runs_close_interrupted()
    orphans = [
        (model, item)
        for model in (TaskQueueItem, ChatQueueItem)
        for item in model.objects.orphaned()
    ]
    owners = {item.worker_id for _model, item in orphans if item.worker_id}
    hosts = dict(WorkerRow.objects.filter(id__in=owners).values_list("id", "hostname"))
    recovered = 0
    for model, item in orphans:
        local = hosts.get(item.worker_id, hostname) == hostname
        if not model.objects.adopt(item, worker_id=worker_id):
            continue  # another worker recovers it (or it ended meanwhile)
        item.worker_id = worker_id
        if local and item.pid and item.pgid and item.process_started_at:
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
    stopped = item.stop_requested_at is not None or superseded
    return int(model.objects.requeue(item, stopped=stopped))


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
    ):
        # Before the worker's threads exist (the process's too, with `--with-worker`).
        limit_malloc_arenas()
        config = settings.CONFIG
        self.poll_interval = poll_interval
        self.capacity = config.capacity if capacity is None else capacity  # 0: no limit
        self.heartbeat = heartbeat or config.worker_heartbeat
        self.stale_after = stale_after or config.worker_stale_after
        self.worker_id: str | None = None  # our Worker row, once registered
        self.hostname = socket.gethostname()
        self.reserved = 0  # runs claimed or being claimed (capacity)
        self.next_orphans = 0.0
        self.last_beat = time.monotonic()
        self.advertised: frozenset[str] | None = None
        self.peers: list[dict] = []  # the other live workers, as of our last heartbeat
        self.listener: WorkListener | None = None
        self.beats: threading.Thread | None = None
        self.limits = limits or LimitWatch()
        self.next_limits = 0.0
        self.shutdown = threading.Event()
        self.stop_requested_at: float | None = None  # monotonic, see request_stop
        self.lock = threading.Lock()
        self.workspaces: dict[str, set[threading.Thread]] = {}  # workspace id → its runners
        self.runs: dict[tuple[str, str], threading.Event] = {}  # (kind, item id) → stop event
        self.chat_threads: set[threading.Thread] = set()
        self.sock: socket.socket | None = None
        self.kick_r, self.kick_w = os.pipe()
        self.next_cleanup = 0.0
        self.next_poll = 0.0  # when to look for new work without a wake-up
        self.next_health = 0.0
        self.health = health.HealthChecks()
        self.health_requests: dict = {}  # CLI → the check request already handed to self.health

    # lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        shared = pickup.shared_database()
        if not shared:  # SQLite: one worker per data directory; older rows are dead workers
            self.lock_handle = acquire_lock()
            workers_forget(worker_ids=WorkerRow.objects.values_list("id", flat=True))
        self.sock = _bind_wake_socket()
        if uses_notify():
            self.listener = WorkListener.connect()
        seed_sample_workspace_if_first_launch()
        self.register()
        recovered = self.recover_dead_workers()
        self.beats = threading.Thread(
            target=self._beat_forever, name="malamar-heartbeat", daemon=True
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
        if thread.is_alive():
            log.warning("The database did not answer while stopping: the worker stops without it")
            return False
        return True

    def stop(self) -> None:
        """Stop picking up, kill every running CLI, give threads a moment, then return."""
        self.request_stop()
        with self.lock:
            threads = [t for runners in self.workspaces.values() for t in runners]
            threads += list(self.chat_threads)
        deadline = time.monotonic() + SHUTDOWN_GRACE_SECONDS
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self.health.stop(timeout=max(0.0, deadline - time.monotonic()))
        if self.beats is not None:
            self.beats.join(timeout=max(0.0, deadline - time.monotonic()))
        self._before_the_deadline(self.retire)
        if self.listener is not None:
            self.listener.close()
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
        woken = self._wait_for_wake()
        if self.shutdown.is_set():
            return
        try:
            self.watch_stops()
            # New work comes with a wake-up (the server pokes after each commit, a finished
            # workspace thread kicks) or is found by the poll; the 100 ms ticks while runs are
            # busy only watch for stops.
            now = time.monotonic()
            if woken or now >= self.next_poll:
                self.next_poll = now + self.poll_interval
                self.spawn_workspaces()
                self.spawn_chats()
                self.run_jobs()
        except Exception:
            log.exception("Worker loop step failed; continuing")
            connection.close()
            time.sleep(0.2)

    def _wait_for_wake(self) -> bool:
        """Sleep until a wake-up or the next tick; True when something woke us."""
        with self.lock:
            busy = bool(self.runs)
        timeout = STOP_WATCH_SECONDS if busy else self.poll_interval
        sources = [self.kick_r] + ([self.sock] if self.sock else [])
        if self.listener is not None and self.listener.fileno() is not None:
            sources.append(self.listener)
        ready, _, _ = select.select(sources, [], [], timeout)
        for source in ready:
            with contextlib.suppress(OSError):
                if source is self.kick_r:
                    os.read(self.kick_r, 4096)
                elif source is self.listener:
                    self.listener.drain()
                else:
                    while source.recv(64):
                        pass
        return bool(ready)

    # identity and heartbeat (DESIGN "Scale-out") ---------------------------------------
    def register(self) -> None:
        self.advertised = self.healthy_clis()
        row = worker_register(
            hostname=self.hostname,
            pid=os.getpid(),
            capacity=self.capacity,
            clis=self.advertised,
            version=VERSION,
        )
        self.worker_id = row.id
        self.last_beat = time.monotonic()

    def _before_the_deadline(self, work) -> None:
        """Database work of a clean stop, given up at the stop deadline (a hung database)."""
        thread = threading.Thread(target=_closing(work), name="malamar-stopping", daemon=True)
        thread.start()
        thread.join(
            timeout=max(0.1, self.stop_requested_at + STOP_DEADLINE_SECONDS - time.monotonic())
        )
        if thread.is_alive():
            log.warning("The database did not answer: the worker's runs are recovered later")

    def retire(self) -> None:
        """A clean stop: our runs were stopped; recover them now rather than after a timeout
        (they run again on another worker, or on us at the next start)."""
        if not self.worker_id:
            return
        try:
            worker_retire(worker_id=self.worker_id)
            if pickup.shared_database():
                recover(hostname=self.hostname, worker_id=self.worker_id)
        except Exception:
            log.exception("Could not retire the worker's row")

    def healthy_clis(self) -> frozenset[str]:
        """The CLIs this worker's own health checks found usable ("not checked yet" counts)."""
        found = self.health.results
        unusable = {CliHealthStatus.UNHEALTHY}
        return frozenset(cli for cli in CliType.values if found.get(cli) not in unusable)

    def _beat_forever(self) -> None:
        """The heartbeat has a thread of its own: a slow job in the main loop (a cleanup, a
        big snapshot prune) must never make this worker look dead."""
        try:
            while not self.shutdown.wait(self.heartbeat):
                try:
                    self.beat()
                except Exception:
                    log.exception("Heartbeat step failed; continuing")
                    connection.close()
        finally:
            connection.close()

    def beat(self) -> None:
        """The heartbeat, off the run path (every `heartbeat` seconds from the main loop):
        we are alive, with these CLIs; other workers that stopped beating are taken over. A
        worker that finds it was taken over (it paused, or lost the database for longer than
        `stale_after`) drops its runs and comes back under a new id."""
        now = time.monotonic()
        clis = self.healthy_clis()
        changed = clis if clis != self.advertised else None
        try:
            alive = worker_heartbeat(worker_id=self.worker_id, clis=changed)
        except Exception:
            log.exception("Heartbeat failed")
            connection.close()
            if now - self.last_beat > self.stale_after:
                self.drop_runs("no heartbeat for longer than the stale limit")
            return
        self.last_beat = now
        self.advertised = clis
        if not alive:
            self.drop_runs("another worker took this worker's runs over")
            self.register()
            return
        if pickup.shared_database():
            self.recover_dead_workers()

    def drop_runs(self, why: str) -> None:
        """Kill every run we have (their items are another worker's now): the pipeline's
        ownership checks make sure none of them writes anything more."""
        with self.lock:
            stops = list(self.runs.values())
        if stops:
            log.warning("Dropping this worker's runs", extra={"why": why, "runs": len(stops)})
        for stop in stops:
            stop.set()

    def recover_dead_workers(self) -> int:
        """Take over workers whose heartbeat is stale (one conditional UPDATE each: one of the
        workers noticing wins) and recover every run no live worker owns, as a restart would
        (at a start with SQLite no other row is left: every run in progress)."""
        fields = ("id", "heartbeat_at", "clis", "hostname", "pid")
        live = list(WorkerRow.objects.live_rows().values(*fields))
        cutoff = timezone.now() - timedelta(seconds=self.stale_after)
        self.peers = [row for row in live if row["id"] != self.worker_id]
        took = [
            row["id"]
            for row in self.peers
            if (row["heartbeat_at"] < cutoff and self._take_over(row["id"]))
            or (self._died_here(row) and self._take_over(row["id"], now=True))
        ]
        self.peers = [row for row in self.peers if row["id"] not in took]
        now = time.monotonic()
        if not took and now < self.next_orphans:
            return 0
        self.next_orphans = now + self.stale_after
        if took:
            log.warning("Taking over stale workers", extra={"workers": took})
        recovered = recover(hostname=self.hostname, worker_id=self.worker_id)
        workers_forget_taken_over()
        if recovered:
            self.kick()
        return recovered

    def _died_here(self, row: dict) -> bool:
        """A worker of this machine whose process is gone (killed, crashed, then restarted):
        no need to wait for its heartbeat to go stale."""
        return row["hostname"] == self.hostname and not psutil.pid_exists(row["pid"])

    def _take_over(self, worker_id: str, *, now: bool = False) -> bool:
        stale_after = 0 if now else self.stale_after
        return worker_take_over(worker_id=worker_id, by=self.worker_id, stale_after=stale_after)

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
            wanted = queue.objects.still_wanted(ids, worker_id=self.worker_id)
            for item_id in ids:
                stop = running[(kind, item_id)]
                if item_id not in wanted and not stop.is_set():
                    log.info("Stopping a run", extra={"item": item_id})
                    stop.set()

    def spawn_workspaces(self) -> None:
        """A runner thread per task that may start, up to the workspace's parallel limit (and
        this worker's capacity)."""
        waiting = pickup.workspaces_with_work()
        limits = pickup.parallel_limits(waiting) if waiting else {}
        if waiting and pickup.shared_database():
            waiting = self._ours_to_run(waiting, limits)
        with self.lock:
            for workspace_id, startable in waiting.items():
                runners = self.workspaces.setdefault(workspace_id, set())
                limit = limits.get(workspace_id, 1)
                for _ in range(min(startable, limit - len(runners), self._room())):
                    thread = threading.Thread(
                        target=self._workspace_thread,
                        args=(workspace_id, limit),
                        name=f"malamar-ws-{workspace_id}",
                        daemon=True,
                    )
                    runners.add(thread)
                    thread.start()
                if not runners:
                    self.workspaces.pop(workspace_id, None)

    def _ours_to_run(self, waiting: dict[str, int], limits: dict[str, int]) -> dict[str, int]:
        """Workers sharing PostgreSQL: leave a workspace that runs as many tasks as it may (on
        any worker), and one whose agents need a CLI that is unusable here but usable on
        another live worker (with no such worker, we run it, as a single worker would)."""
        running = pickup.running_counts(waiting)
        needs = pickup.workspace_clis(waiting)
        mine = self.healthy_clis()
        others = [frozenset(peer["clis"] or ()) for peer in self.peers]
        ours = {}
        for workspace_id, startable in waiting.items():
            room = limits.get(workspace_id, 1) - running.get(workspace_id, 0)
            need = needs.get(workspace_id, set())
            if need - mine and any(need <= clis for clis in others):
                continue
            if room > 0:
                ours[workspace_id] = min(startable, room)
        return ours

    def _left_to_others(self) -> frozenset[str]:
        """CLIs unusable here that another live worker advertises: their work is theirs."""
        mine = self.healthy_clis()
        others = set().union(*(peer["clis"] or () for peer in self.peers)) if self.peers else set()
        return frozenset(others - mine)

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

    def _workspace_thread(self, workspace_id: str, limit: int) -> None:
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
        finally:
            with self.lock:
                runners = self.workspaces.get(workspace_id, set())
                runners.discard(threading.current_thread())
                if not runners:
                    self.workspaces.pop(workspace_id, None)
            connection.close()
            release_free_memory()
            self.kick()  # new work may have arrived while this thread was finishing

    def spawn_chats(self) -> None:
        """Every queued chat message gets its own thread: chats never wait for each other
        (up to this worker's capacity)."""
        if not pickup.chats_queued():
            return
        avoid = self._left_to_others() if pickup.shared_database() else frozenset()
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

    def _chat_thread(self, item, stop: threading.Event) -> None:
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
