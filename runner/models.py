from datetime import timedelta

from django.db import models
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from core.compiled_queries import compiled_update
from core.fields import id_field


class QueueStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"


class QueueItemQuerySet(models.QuerySet):
    """The worker's side of a queue (task passes and chat replies alike). Only the worker
    changes an item's status after the claim; every change is one UPDATE guarded by the
    status it expects, so a claim or a finish never races another writer."""

    def queued(self):
        return self.filter(status=QueueStatus.QUEUED)

    def running(self):
        return self.filter(status=QueueStatus.IN_PROGRESS)

    def finished(self):
        return self.filter(status__in=[QueueStatus.COMPLETED, QueueStatus.FAILED])

    def claimable(self, item_id: str, worker_id: str | None):
        """The item while queued; with `worker_id`, only while that worker's row is live (a
        worker that was taken over and has not noticed yet claims nothing)."""
        items = self.filter(id=item_id, status=QueueStatus.QUEUED)
        if worker_id is None:
            return items
        return items.filter(Exists(Worker.objects.live_rows().filter(id=worker_id)))

    def claim(self, item_id: str, *, worker_id: str | None = None) -> bool:
        """queued → in_progress in one statement, owned by `worker_id`; False if another claim
        (or a cancel) won."""
        return bool(
            self.claimable(item_id, worker_id).update(
                status=QueueStatus.IN_PROGRESS, worker_id=worker_id, updated_at=timezone.now()
            )
        )

    def owned(self, item):
        """`item` (a claimed item) while it is still the claim of the worker that holds it: a
        worker whose runs another worker took over writes nothing."""
        return self.filter(id=item.id, worker_id=item.worker_id)

    def continue_at(self, item, **fields) -> bool:
        """Where the item's pass goes on if its worker dies now (`fields`, e.g. the next agent),
        in the caller's transaction. Every step's finish writes it."""

        def ours(item_id, worker_id=None):
            return self.model.objects.filter(id=item_id, worker_id=worker_id)

        return self._update_compiled(item, "continue_at", ours, fields) > 0

    def _update_compiled(self, item, name: str, build, changes: dict) -> int:
        """`build(item_id, worker_id)`'s rows for `item` updated with `changes`, in one UPDATE
        whose condition is compiled once (core.compiled_queries): building the update cost
        more than running it, on the path between two agents."""
        values = {"item_id": item.id}
        if item.worker_id is not None:
            values["worker_id"] = item.worker_id
        key = (name, self.model._meta.label, item.worker_id is None, *changes)
        return compiled_update(key, build, changes, **values)

    def finish(self, item, status: str) -> bool:
        """in_progress → completed/failed, forgetting the process (it has ended). False when
        the item was not ours to finish (taken over, or ended already)."""
        return bool(
            self.owned(item)
            .filter(status=QueueStatus.IN_PROGRESS)
            .update(status=status, pid=None, pgid=None, updated_at=timezone.now())
        )

    def record_process(self, item, *, pid: int, pgid: int, started_at: float, **fields) -> bool:
        """The CLI that runs this item, recorded before it may run (worker.process
        holds it at its gate), so a recovery can kill it whatever happens to us; `fields`: what
        else the item keeps about the run (where a task pass continues). One statement (no
        join) that is also the start's "still wanted" check: False, nothing written, when the
        item was stopped (every move by a user asks that), is gone (with its task or chat) or
        is no longer ours. The finish checks the rest (`wanted()`)."""

        def unstopped(item_id, worker_id=None):
            return self.model.objects.unstopped().filter(id=item_id, worker_id=worker_id)

        changes = {"pid": pid, "pgid": pgid, "process_started_at": started_at, **fields}
        return self._update_compiled(item, "record_process", unstopped, changes) > 0

    def pause(self, item, *, cli_type: str, **resume) -> bool:
        """in_progress → queued, waiting for `cli_type` (out of quota); `resume` says where the
        run continues (DESIGN "Usage limits")."""
        return bool(
            self.owned(item)
            .filter(status=QueueStatus.IN_PROGRESS)
            .update(
                status=QueueStatus.QUEUED,
                waiting_for_cli=cli_type,
                pid=None,
                pgid=None,
                updated_at=timezone.now(),
                **resume,
            )
        )

    def release(self, *, cli_type: str) -> int:
        """queued items that waited for `cli_type` (out of quota) may run again: how many."""
        waiting = self.queued().filter(waiting_for_cli=cli_type)
        return waiting.update(waiting_for_cli="", updated_at=timezone.now())

    def adopt(self, item, *, worker_id: str | None) -> bool:
        """A recoverer makes a dead worker's running item its own before it kills the CLI and
        requeues it: one conditional UPDATE, so of several recoverers one wins (True), and the
        worker that held it (only paused, perhaps) can write nothing for it any more."""
        return bool(
            self.owned(item).filter(status=QueueStatus.IN_PROGRESS).update(worker_id=worker_id)
        )

    def requeue(self, item, *, stopped: bool) -> bool:
        """After a crash: an interrupted item runs again, unless it was stopped (then failed).
        Only while it is still the claim that was read (one recoverer wins; a claim made since
        by another worker stays)."""
        status = QueueStatus.FAILED if stopped else QueueStatus.QUEUED
        return bool(
            self.owned(item)
            .filter(status=QueueStatus.IN_PROGRESS)
            .update(status=status, pid=None, pgid=None, worker_id=None, updated_at=timezone.now())
        )

    def taken_over(self, item) -> bool:
        """Whether another worker made `item` its own (a recovery adopted or requeued it, maybe
        claimed it again) while the worker that holds it went on, thought dead."""
        others = self.filter(id=item.id).exclude(worker_id=item.worker_id)
        return item.worker_id is not None and others.exists()

    def orphaned(self):
        """Running items whose worker is gone: no live worker row claims them."""
        live = Worker.objects.live_rows().filter(id=OuterRef("worker_id"))
        return self.running().exclude(Exists(live))

    def prune_finished(self, *, before) -> int:
        """Housekeeping: finished items last changed before `before` go; returns how many."""
        return self.finished().filter(updated_at__lt=before).delete()[0]

    @staticmethod
    def unstopped_q(prefix: str = "") -> Q:
        """Running and nobody asked to stop it (`prefix`: the path from another model, so a
        query can join the item instead of compiling a subquery)."""
        return Q(**{f"{prefix}status": QueueStatus.IN_PROGRESS, f"{prefix}stop_requested_at": None})

    def unstopped(self):
        """Running items nobody asked to stop."""
        return self.filter(self.unstopped_q())

    def wanted(self):
        """Running items whose run is still wanted (a kind may add conditions)."""
        return self.unstopped()

    def wanted_ids(self, item_ids, *, worker_id: str | None = None) -> set[str]:
        """Of these running items of `worker_id`, the ones still wanted (and that still exist,
        and that no other worker took over): a plain read, for the stop watcher (the run's own
        finish locks its rows instead)."""
        wanted = self.wanted().filter(id__in=list(item_ids), worker_id=worker_id)
        return set(wanted.values_list("id", flat=True))


class QueueItem(models.Model):
    """What task queue items and chat queue items share: one run the worker claims, may be
    asked to stop, and records the process of (DESIGN "One run pipeline")."""

    status = models.CharField(
        max_length=12, choices=QueueStatus.choices, default=QueueStatus.QUEUED
    )
    # Set by the server to ask the worker to stop this run (cancel, move, delete).
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    # The running CLI, so a restarted worker can kill survivors of a crashed one.
    pid = models.IntegerField(null=True, blank=True)
    pgid = models.IntegerField(null=True, blank=True)
    process_started_at = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # The CLI this queued item waits for (a health key: out of quota, or unable to run at all):
    # pickup skips the item while that CLI is limited or broken (DESIGN "Usage limits",
    # "Retries").
    waiting_for_cli = models.CharField(max_length=40, blank=True, default="")
    # The worker that claimed it (a Worker id; not a foreign key: the row of a worker that was
    # taken over goes, its items' ids stay until they are recovered). Every write after the
    # claim is guarded by it, so a worker that lost its runs to another can write nothing.
    worker_id = models.CharField(max_length=21, null=True, blank=True, db_index=True)

    objects = QueueItemQuerySet.as_manager()

    class Meta:
        abstract = True


class WorkerQuerySet(models.QuerySet):
    def live_rows(self):
        """Workers nobody took over (one may still be stale: nobody noticed yet)."""
        return self.filter(taken_over_at=None)

    def alive(self, *, stale_after: float, now=None):
        """Workers that beat within `stale_after` seconds."""
        since = (now or timezone.now()) - timedelta(seconds=stale_after)
        return self.live_rows().filter(heartbeat_at__gte=since)

    def stale(self, *, stale_after: float, now=None):
        """Workers that stopped beating and that nobody took over yet."""
        since = (now or timezone.now()) - timedelta(seconds=stale_after)
        return self.live_rows().filter(heartbeat_at__lt=since)


class Worker(models.Model):
    """One running worker process (`manage.py runworker`), on any machine sharing the database:
    what it can run, and its heartbeat. A worker whose heartbeat is stale is taken over by
    another (`taken_over_at`, one conditional UPDATE: one recoverer wins), which recovers its
    runs as a restart would; the row goes with the recovery."""

    id = id_field()
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    started_at = models.DateTimeField(default=timezone.now)
    heartbeat_at = models.DateTimeField(default=timezone.now)
    # Most runs at once (0: no limit), and the CLI types its own health checks found usable.
    capacity = models.IntegerField(default=0)
    clis = models.JSONField(default=list, blank=True)
    version = models.CharField(max_length=50, blank=True, default="")
    taken_over_at = models.DateTimeField(null=True, blank=True)
    taken_over_by = models.CharField(max_length=21, blank=True, default="")

    objects = WorkerQuerySet.as_manager()

    class Meta:
        db_table = "workers"
        indexes = [models.Index(fields=["taken_over_at", "heartbeat_at"])]

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"


class CliHealthStatus(models.TextChoices):
    NOT_CHECKED = "not_checked", "Not checked yet"
    HEALTHY = "healthy", "Healthy"
    UNHEALTHY = "unhealthy", "Unhealthy"
    # The health check took longer than the CLI's time limit: a busy machine, not a broken
    # CLI, so it stays available (DESIGN "Health checks"); only a failed check is UNHEALTHY.
    SLOW = "slow", "Slow to answer"


# The marks a health check leaves on a CLI and a successful real run clears.
HEALTH_MARKS = (CliHealthStatus.UNHEALTHY, CliHealthStatus.SLOW)


class CliHealth(models.Model):
    """The worker's latest health check per CLI, stored for the server to read."""

    # One of the four CLIs, or "custom:<agent id>" for a custom-command agent's own check.
    cli_type = models.CharField(primary_key=True, max_length=40)
    status = models.CharField(
        max_length=12, choices=CliHealthStatus.choices, default=CliHealthStatus.NOT_CHECKED
    )
    error = models.TextField(blank=True, default="")
    version = models.CharField(max_length=200, blank=True, default="")
    binary_path = models.TextField(blank=True, default="")
    # What the CLI answered to the last health prompt (the "Test" button shows it).
    answer = models.TextField(blank=True, default="")
    checked_at = models.DateTimeField(null=True, blank=True)
    # Set by the server to ask for a check with the real prompt; the worker clears it once a
    # check that started after it has ended.
    refresh_requested_at = models.DateTimeField(null=True, blank=True)
    # Out of quota (DESIGN "Usage limits"): since when, until when (None: unknown, probed at
    # `probe_at` on a back-off), and the CLI's own words.
    limited_since = models.DateTimeField(null=True, blank=True)
    limited_until = models.DateTimeField(null=True, blank=True)
    limit_message = models.TextField(blank=True, default="")
    probe_at = models.DateTimeField(null=True, blank=True)
    probe_attempts = models.IntegerField(default=0)

    class Meta:
        db_table = "cli_health"

    def __str__(self) -> str:
        return f"{self.cli_type}: {self.status}"

    @property
    def is_limited(self) -> bool:
        return self.limited_since is not None

    @property
    def is_available(self) -> bool:
        # DESIGN: "Not checked yet" counts as available so chats aren't blocked at startup.
        return self.status != CliHealthStatus.UNHEALTHY


class RunStatus(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    STOPPED = "stopped", "Stopped"
    INTERRUPTED = "interrupted", "Interrupted"
    LIMITED = "limited", "Paused: usage limit"


class RunKind(models.TextChoices):
    AGENT = "agent", "Agent"
    # One of a workspace's checks (issue 30): a command, not a CLI; its traces are its output.
    CHECK = "check", "Check"


class AgentRun(models.Model):
    """One CLI invocation for a task step or a chat reply, with its usage and trace; or one
    check command of a task (kind "check")."""

    id = models.CharField(primary_key=True, max_length=21)
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="runs"
    )
    task = models.ForeignKey(
        "tasks.Task", on_delete=models.CASCADE, null=True, blank=True, related_name="runs"
    )
    chat = models.ForeignKey(
        "chats.Chat", on_delete=models.CASCADE, null=True, blank=True, related_name="runs"
    )
    kind = models.CharField(
        max_length=8, choices=RunKind.choices, default=RunKind.AGENT, db_default=RunKind.AGENT
    )
    agent_id = models.CharField(max_length=21, null=True, blank=True)
    agent_name = models.CharField(max_length=200)
    cli_type = models.CharField(max_length=10)
    # The model used: what the CLI's stream reported, else the agent's setting ("" = the CLI's
    # default, not reported).
    model = models.CharField(max_length=200, blank=True, default="")
    # The agent's own CLI when this run used its fallback CLI (that one was out of quota).
    fallback_for = models.CharField(max_length=10, blank=True, default="")
    status = models.CharField(max_length=12, choices=RunStatus.choices, default=RunStatus.RUNNING)
    # The worker that runs it (its queue item's): a recovery closes only a dead worker's runs.
    worker_id = models.CharField(max_length=21, null=True, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    last_output_at = models.DateTimeField(null=True, blank=True)
    stalled_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cost_usd = models.FloatField(null=True, blank=True)
    current_action = models.TextField(blank=True, default="")
    trace_count = models.IntegerField(default=0)
    # Snapshots of the working directory before and after the run (runner/snapshots.py): the
    # trees live in the private store `snapshot_store` under the data directory.
    working_directory = models.TextField(blank=True, default="")
    git_branch = models.CharField(max_length=255, blank=True, default="")
    snapshot_store = models.CharField(max_length=64, blank=True, default="")
    tree_before = models.CharField(max_length=64, blank=True, default="")
    tree_after = models.CharField(max_length=64, blank=True, default="")
    snapshot_error = models.TextField(blank=True, default="")
    # What this run changed, and what the task changed from its first snapshot up to this run
    # (the board shows the latter without asking git).
    files_changed = models.IntegerField(null=True, blank=True)
    lines_added = models.IntegerField(null=True, blank=True)
    lines_removed = models.IntegerField(null=True, blank=True)
    task_files_changed = models.IntegerField(null=True, blank=True)
    task_lines_added = models.IntegerField(null=True, blank=True)
    task_lines_removed = models.IntegerField(null=True, blank=True)

    class Meta:
        db_table = "agent_runs"
        indexes = [
            models.Index(fields=["task", "started_at"]),
            models.Index(fields=["chat", "started_at"]),
            models.Index(fields=["workspace", "started_at"]),
            models.Index(fields=["status"]),
        ]

    def __str__(self) -> str:
        return f"{self.agent_name} {self.cli_type} {self.status}"


class TraceEvent(models.Model):
    id = models.BigAutoField(primary_key=True)
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, related_name="traces")
    seq = models.IntegerField()
    kind = models.CharField(max_length=12)
    action_kind = models.CharField(max_length=20, blank=True, default="")
    text = models.TextField()
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "trace_events"
        indexes = [models.Index(fields=["run", "seq"])]

    def __str__(self) -> str:
        return f"{self.kind}: {self.text[:60]}"
