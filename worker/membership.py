"""This worker among the others (DESIGN "Scale-out"): its row, its heartbeat and the CLIs it
advertises, its peers and what they may run, taking over the workers that stopped beating, and
recovering the runs of dead workers (a restart's too: at a start with SQLite, where a file
lock makes us the only worker, every run in progress).

A recovery kills what a dead worker left running, then re-queues its runs: a task pass at the
agent it was interrupted at (tasks.services.task_pass_interrupted); the totals it left for a
next run's finish are counted from the trees on the runs' rows. Every CLI a worker starts
is recorded before it may run (worker.process holds it at a gate until then), so there
is no CLI a recovery does not know.
"""

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import psutil
from django.db import connection
from django.utils import timezone

from chats.models import ChatQueueItem
from core.version import VERSION
from runner.models import Worker as WorkerRow
from runner.services import (
    agent_runs_close_interrupted,
    worker_heartbeat,
    worker_register,
    worker_retire,
    worker_take_over,
    workers_forget_taken_over,
)
from tasks.models import TaskQueueItem
from tasks.services import task_pass_interrupted
from worker import pickup
from worker.process import kill_tree
from worker.snapshotting import totals_recovered

log = logging.getLogger(__name__)


def recover(*, hostname: str, worker_id: str | None) -> int:
    """Kill CLIs a dead worker left behind, then re-queue what it was running: every run no
    live worker owns. Each item first becomes ours (`worker_id`, one conditional UPDATE: of
    several recoverers one wins, and a worker that was only paused can write nothing for it
    any more), then its CLI is killed, then it is re-queued. `hostname`: ours; a dead
    worker's CLIs on another machine are not ours to kill (that machine's worker kills them
    if it comes back)."""
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
        if local:
            _kill_leftovers(item)
        recovered += _requeue(model, item)
    if totals_recovered():  # (a git call per run, at most 100 runs)
        log.info("Recorded the totals of runs a stopped worker had not counted")
    return recovered


def _kill_leftovers(item) -> None:
    """The item's CLI, and a task pass's next agent's (started ahead, and maybe let go before
    the finish of the agent before was written: worker.pipeline's early go)."""
    recorded = [(item.pid, item.pgid, item.process_started_at)]
    names = ("next_pid", "next_pgid", "next_process_started_at")
    recorded.append(tuple(getattr(item, name, None) for name in names))
    for pid, pgid, started_at in recorded:
        killed = pid and pgid and started_at and kill_tree(pid, pgid=pgid, create_time=started_at)
        if killed:
            log.warning("Killed a leftover CLI", extra={"pid": pid, "item": item.id})


def _requeue(model, item) -> int:
    """An interrupted item runs again (a task pass at the agent it was at), unless the user
    stopped it."""
    stopped = item.stop_requested_at is not None
    if model is TaskQueueItem:
        return int(task_pass_interrupted(item=item, stopped=stopped))
    return int(model.objects.requeue(item, stopped=stopped))


class Membership:
    """This worker's row and heartbeat, its peers, and the take-overs and recoveries.

    `healthy_clis`: the CLIs this worker's own checks found usable (it advertises them);
    `drop_runs(why)`: kill every run of ours (another worker owns them now); `kick`: wake
    the loop (recovered work waits)."""

    def __init__(
        self,
        *,
        capacity: int,
        heartbeat: float,
        stale_after: float,
        healthy_clis: Callable[[], frozenset[str]],
        drop_runs: Callable[[str], None],
        kick: Callable[[], None],
    ):
        self.capacity, self.heartbeat, self.stale_after = capacity, heartbeat, stale_after
        self.healthy_clis, self.drop_runs, self.kick = healthy_clis, drop_runs, kick
        self.worker_id: str | None = None  # our Worker row, once registered
        self.hostname = socket.gethostname()
        self.last_beat = time.monotonic()
        self.next_orphans = 0.0
        self.advertised: frozenset[str] | None = None
        self.peers: list[dict] = []  # the other live workers, as of our last heartbeat

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

    def leave(self) -> None:
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

    # the heartbeat -----------------------------------------------------------------------
    def beat_forever(self, shutdown: threading.Event) -> None:
        """The heartbeat has a thread of its own: a slow job in the main loop (a cleanup, a
        big snapshot prune) must never make this worker look dead."""
        try:
            while not shutdown.wait(self.heartbeat):
                try:
                    self.beat()
                except Exception:
                    log.exception("Heartbeat step failed; continuing")
                    connection.close()
        finally:
            connection.close()

    def beat(self) -> None:
        """We are alive, with these CLIs; other workers that stopped beating are taken over. A
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

    # take-overs and recovery ---------------------------------------------------------------
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

    # what is ours to run -------------------------------------------------------------------
    def ours_to_run(self, waiting: dict[str, int], limits: dict[str, int]) -> dict[str, int]:
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

    def left_to_others(self) -> frozenset[str]:
        """CLIs unusable here that another live worker advertises: their work is theirs."""
        mine = self.healthy_clis()
        others = set().union(*(peer["clis"] or () for peer in self.peers)) if self.peers else set()
        return frozenset(others - mine)
