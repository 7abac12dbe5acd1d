from django.db import models
from django.db.models import (
    Case,
    Count,
    Exists,
    IntegerField,
    OuterRef,
    Q,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.compiled_queries import compiled_update
from core.fields import choices_check, id_field
from runner.models import QueueItem, QueueItemQuerySet, QueueStatus


class TaskStatus(models.TextChoices):
    TODO = "todo", "Todo"
    IN_PROGRESS = "in_progress", "In Progress"
    IN_REVIEW = "in_review", "In Review"
    DONE = "done", "Done"


RUNNABLE_STATUSES = (TaskStatus.TODO, TaskStatus.IN_PROGRESS)


class ActorType(models.TextChoices):
    USER = "user", "User"
    AGENT = "agent", "Agent"
    SYSTEM = "system", "System"


class CommentKind(models.TextChoices):
    """What a comment is, stored when it is written (never guessed from its text): the author's
    type, or `error` for the system comments that report a failed run."""

    USER = "user", "User"
    AGENT = "agent", "Agent"
    SYSTEM = "system", "System"
    ERROR = "error", "Error"
    # A failed round of the workspace's checks (issue 30): the command, its exit code and the
    # end of its output, written by "Checks" for the agents to fix.
    CHECKS = "checks", "Checks"


class Verdict(models.TextChoices):
    """A person's review of an In Review task (DESIGN "Review verdicts")."""

    APPROVE = "approve", "Approve"
    REQUEST_CHANGES = "request_changes", "Request changes"
    COMMENT = "comment", "Comment"


class LineSide(models.TextChoices):
    """Which side of a diff a line comment is on: the lines as the run left them (new), or
    the lines it changed or removed, as they were before it (old)."""

    OLD = "old", "Old"
    NEW = "new", "New"


class TaskQuerySet(models.QuerySet):
    def with_counts(self):
        """Derived read-only fields for lists and details, in one query. Correlated subqueries,
        not a join + GROUP BY over the comments: a 2,000-task board stays one cheap query."""
        comments = (
            TaskComment.objects.filter(task_id=OuterRef("pk"))
            .order_by()
            .values("task_id")
            .annotate(n=Count("id"))
            .values("n")
        )
        running = TaskQueueItem.objects.unstopped().filter(task_id=OuterRef("pk"))
        return self.annotate(
            comment_count=Coalesce(Subquery(comments, output_field=IntegerField()), Value(0)),
            is_processing=Exists(running),
        )

    def by_recent_update(self):
        return self.order_by("-updated_at", "-created_at")

    def paused(self):
        """Todo tasks with no pass queued or running: imported work waiting for the person to
        resume it, or a task whose retries were stopped."""
        return self.filter(status=TaskStatus.TODO).exclude(_has_pass())

    def with_pause_state(self):
        """Annotate `is_paused` (see paused())."""
        return self.annotate(
            is_paused=Case(
                When(Q(status=TaskStatus.TODO) & ~_has_pass(), then=Value(True)),
                default=Value(False),
                output_field=models.BooleanField(),
            )
        )


def _has_pass():
    """The task has a pass queued, or running that nobody asked to stop."""
    active = TaskQueueItem.objects.filter(
        Q(status=QueueStatus.QUEUED) | QueueItemQuerySet.unstopped_q(), task_id=OuterRef("pk")
    )
    return Exists(active)


# The comments that keep their task going until an agent has read them (DESIGN "No lost
# comment"): a person's and an agent's (through Malamar's MCP server too). System notes and
# error reports inform the next agent without sending the task around.
KEEPS_GOING = (CommentKind.USER, CommentKind.AGENT, CommentKind.CHECKS)


class ChecksStatus(models.TextChoices):
    """Where a task's checks stand (issue 30): not run (""), all passed, the last round failed
    (the agents are fixing it), or failing after the workspace's attempts (In Review anyway)."""

    NONE = "", "Not run"
    PASSED = "passed", "Checks passed"
    FAILED = "failed", "Checks failed"
    FAILING = "failing", "Checks failing"


class PassPhase(models.TextChoices):
    """Where a pass is: its agents run, or they are done and the workspace's checks run (so a
    restart re-runs the checks, not the agents)."""

    AGENTS = "", "Agents"
    CHECKS = "checks", "Checks"
    # A person's "Run checks" on an In Review task: only the checks, nothing moves.
    MANUAL = "manual", "Checks run by hand"


def runnable_pass_q(prefix: str = "") -> Q:
    """A pass that may run as far as its task's status goes: the task is Todo or In Progress,
    or it is In Review and the pass is a person's "Run checks" (`prefix`: the path to the
    queue item from another model)."""
    return Q(**{f"{prefix}task__status__in": RUNNABLE_STATUSES}) | Q(
        **{f"{prefix}phase": PassPhase.MANUAL, f"{prefix}task__status": TaskStatus.IN_REVIEW}
    )


class TaskCommentQuerySet(models.QuerySet):
    def errors(self):
        return self.filter(kind=CommentKind.ERROR)

    def keeping_going(self):
        """The comments that keep their task going until an agent has read them (KEEPS_GOING),
        but a review note (the verdict "Comment"): the next pass reads it, it does not start
        one (DESIGN "No lost comment", its exception)."""
        return self.filter(kind__in=KEEPS_GOING).exclude(verdict=Verdict.COMMENT)

    def undelivered(self):
        """Comments that keep their task going and that no agent's answered input contained
        yet: while one exists, no pass ends in In Review."""
        return self.keeping_going().filter(delivered_at__isnull=True)

    def notes(self):
        """Comments sent with the review verdict "Comment": the agents read them on their next
        pass, but they do not start one (DESIGN "No lost comment", its exception)."""
        return self.filter(verdict=Verdict.COMMENT)

    def anchored(self):
        """Line comments: comments on lines of the task's changes."""
        return self.exclude(anchor_path="")


class Task(models.Model):
    id = id_field()
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="tasks"
    )
    summary = models.CharField(max_length=500)
    description = models.TextField(blank=True, default="")
    status = models.CharField(max_length=12, choices=TaskStatus.choices, default=TaskStatus.TODO)
    is_priority = models.BooleanField(default=False)
    # Retry back-off (DESIGN "Retries"): consecutive failed runs and when the next may start.
    failure_streak = models.PositiveIntegerField(default=0)
    retry_not_before = models.DateTimeField(null=True, blank=True)
    # Branch per task: the task's branch and the branch it started from ("" = none yet).
    branch_name = models.CharField(max_length=250, blank=True, default="")
    branch_base = models.CharField(max_length=200, blank=True, default="")
    # When the branch reached its base (merged by Malamar, or found already in it), and the
    # base's commit then ("" when nothing had to be merged). A Done task with a branch and no
    # merged_at was finished without merging (the person's choice): "unmerged".
    merged_at = models.DateTimeField(null=True, blank=True)
    merge_commit = models.CharField(max_length=64, blank=True, default="", db_default="")
    # The workspace's checks (issue 30): where they stand, failed rounds in a row, and the last
    # round's result ([{name, command, status, exit_code, duration, run_id}]).
    checks_status = models.CharField(
        max_length=8, choices=ChecksStatus.choices, blank=True, default="", db_default=""
    )
    checks_failed_rounds = models.PositiveIntegerField(default=0, db_default=0)
    checks_result = models.JSONField(default=list, blank=True, db_default=[])
    checks_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = TaskQuerySet.as_manager()

    class Meta:
        db_table = "tasks"
        indexes = [models.Index(fields=["workspace", "status", "updated_at"])]
        constraints = [choices_check("status", TaskStatus.choices)]

    def __str__(self) -> str:
        return self.summary

    @property
    def is_merged(self) -> bool:
        return self.merged_at is not None

    @property
    def is_unmerged(self) -> bool:
        """A Done task whose branch did not reach its base: finished without merging."""
        return self.status == TaskStatus.DONE and bool(self.branch_name) and not self.is_merged


class TaskComment(models.Model):
    id = id_field()
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="comments")
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="+"
    )
    user_id = models.CharField(max_length=21, null=True, blank=True)
    # Not a foreign key: a deleted agent's comments keep its id and read "(Deleted Agent)".
    agent_id = models.CharField(max_length=21, null=True, blank=True, db_index=True)
    content = models.TextField()
    kind = models.CharField(max_length=10, choices=CommentKind.choices)
    # The review verdict this comment was sent with ("" = an ordinary comment).
    verdict = models.CharField(
        max_length=16, choices=Verdict.choices, blank=True, default="", db_default=""
    )
    # A line comment's anchor ("" / NULL for other comments): the file, the lines (1-based,
    # inclusive) on one side of the diff, the snapshot the comment was made on (the diff's
    # "after" tree, in its private store), the run whose changes were shown ("" = the whole
    # task's), and the lines quoted as they read then (snapshots are pruned; the quote stays).
    anchor_path = models.TextField(blank=True, default="", db_default="")
    anchor_side = models.CharField(
        max_length=3, choices=LineSide.choices, blank=True, default="", db_default=""
    )
    anchor_start_line = models.PositiveIntegerField(null=True, blank=True)
    anchor_end_line = models.PositiveIntegerField(null=True, blank=True)
    anchor_store = models.CharField(max_length=64, blank=True, default="", db_default="")
    anchor_tree = models.CharField(max_length=64, blank=True, default="", db_default="")
    anchor_run_id = models.CharField(max_length=21, blank=True, default="", db_default="")
    anchor_code = models.TextField(blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # When an agent first answered an input that contained this comment (None: not yet). What
    # each pass's inputs contained, so a comment that arrived while an agent worked is not lost.
    delivered_at = models.DateTimeField(null=True, blank=True)

    objects = TaskCommentQuerySet.as_manager()

    class Meta:
        db_table = "task_comments"
        indexes = [models.Index(fields=["task", "created_at"])]
        constraints = [
            choices_check("kind", CommentKind.choices),
            models.CheckConstraint(
                condition=Q(verdict__in=["", *Verdict.values]), name="task_comment_verdict_valid"
            ),
            models.CheckConstraint(
                condition=Q(anchor_path="")
                | (
                    Q(anchor_side__in=LineSide.values)
                    & Q(anchor_start_line__gte=1)
                    & Q(anchor_end_line__gte=models.F("anchor_start_line"))
                ),
                name="task_comment_anchor_complete",
            ),
        ]

    def __str__(self) -> str:
        return self.content[:60]

    @property
    def author_type(self) -> str:
        if self.user_id:
            return ActorType.USER
        if self.agent_id:
            return ActorType.AGENT
        return ActorType.SYSTEM

    @property
    def is_error(self) -> bool:
        return self.kind == CommentKind.ERROR

    @property
    def is_line_comment(self) -> bool:
        return bool(self.anchor_path)

    @property
    def is_note(self) -> bool:
        return self.verdict == Verdict.COMMENT


class LineCommentDraft(models.Model):
    """A line comment the person drafted in the Changes tab of an In Review task: kept here
    (not in the browser) until a verdict of the composer sends the task's drafts along, so they
    survive a reload and show on another device. One person per install: drafts are the task's."""

    id = id_field()
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="line_comment_drafts")
    path = models.TextField()
    side = models.CharField(max_length=3, choices=LineSide.choices)
    start_line = models.PositiveIntegerField()
    end_line = models.PositiveIntegerField()
    run_id = models.CharField(max_length=21, blank=True, default="")  # "" = the whole task's
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "task_line_comment_drafts"
        indexes = [models.Index(fields=["task", "created_at"])]
        constraints = [choices_check("side", LineSide.choices)]

    def __str__(self) -> str:
        return self.body[:60]

    def as_line_comment(self) -> dict:
        """The draft as a review's `line_comments` item."""
        return {
            "path": self.path,
            "side": self.side,
            "line": self.start_line,
            "end_line": self.end_line,
            "run_id": self.run_id,
            "body": self.body,
        }


class TaskLog(models.Model):
    id = id_field()
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="logs")
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="+"
    )
    event_type = models.CharField(max_length=40)
    actor_type = models.CharField(max_length=10, choices=ActorType.choices)
    actor_id = models.CharField(max_length=21, null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "task_logs"
        indexes = [models.Index(fields=["task", "created_at"])]
        constraints = [choices_check("actor_type", ActorType.choices)]

    def __str__(self) -> str:
        return self.event_type


class TaskDependencyQuerySet(models.QuerySet):
    def open_for(self, task_id):
        """The task's blockers that are not Done yet (`task_id` may be an OuterRef)."""
        return self.filter(task_id=task_id).exclude(blocker__status=TaskStatus.DONE)


class TaskDependency(models.Model):
    """`task` waits for `blocker` (same workspace): while any blocker is not Done, a Todo task
    is not picked up. Deleting either task deletes the link (the blocked task is told)."""

    id = id_field()
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="+"
    )
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="blocker_links")
    blocker = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="blocked_links")
    created_at = models.DateTimeField(default=timezone.now)

    objects = TaskDependencyQuerySet.as_manager()

    class Meta:
        db_table = "task_dependencies"
        indexes = [models.Index(fields=["blocker"])]
        constraints = [
            models.UniqueConstraint(fields=["task", "blocker"], name="one_link_per_blocker"),
            models.CheckConstraint(
                condition=~Q(task=models.F("blocker")), name="task_not_its_own_blocker"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} waits for {self.blocker_id}"


def waiting_for_blockers(task_ref="task_id"):
    """A queued pass that must wait: its task is still Todo (not started) and has a blocker
    that is not Done. One Exists subquery, so a pickup or a claim stays one statement."""
    return Q(task__status=TaskStatus.TODO) & Exists(
        TaskDependency.objects.open_for(OuterRef(task_ref))
    )


class TaskQueueQuerySet(QueueItemQuerySet):
    def eligible(self):
        """Queued passes that may start now as far as dependencies go."""
        return self.queued().exclude(waiting_for_blockers())

    def claim(self, item_id: str, *, worker_id: str | None = None) -> bool:
        """As QueueItemQuerySet.claim, and refused while the task waits for its blockers (a
        blocker re-opened between the pickup's read and this UPDATE). One UPDATE of the items
        the queryset below selects, its SQL compiled once (core.compiled_queries): building
        it took ~1.3 ms of the 1.5 of every pickup's claim."""
        model = self.model

        def claimable(item_id, worker_id=None):
            return model.objects.claimable(item_id, worker_id).exclude(waiting_for_blockers())

        values = {"item_id": item_id}
        if worker_id is not None:
            values["worker_id"] = worker_id
        changes = {
            "status": QueueStatus.IN_PROGRESS,
            "worker_id": worker_id,
            "updated_at": timezone.now(),
        }
        return compiled_update(("task_claim", worker_id is None), claimable, changes, **values) > 0

    def record_next_process(self, item, *, pid: int, pgid: int, started_at: float) -> bool:
        """The next agent's process, at its gate (worker.pipeline's early go): in this run's
        start transaction, before it may ever go. The finish that lets it run records it as the
        item's own process (`continue_at`) and forgets this."""
        changes = {"next_pid": pid, "next_pgid": pgid, "next_process_started_at": started_at}

        def ours(item_id, worker_id=None):
            return self.model.objects.filter(id=item_id, worker_id=worker_id)

        return self._update_compiled(item, "record_next_process", ours, changes) > 0

    def wanted(self):
        """A pass is also unwanted once its task left Todo/In Progress. (Right after a claim
        the task is still Todo for a moment, so Todo counts as wanted.) A person's "Run
        checks" runs on an In Review task."""
        return self.unstopped().filter(runnable_pass_q())


class TaskQueueItem(QueueItem):
    id = id_field()
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="queue_items")
    workspace = models.ForeignKey(
        "workspaces.Workspace", on_delete=models.CASCADE, related_name="+"
    )
    is_priority = models.BooleanField(default=False)
    # A pass paused by a usage limit continues at this agent, counting comments since the
    # pass's real start (DESIGN "Usage limits").
    resume_agent_id = models.CharField(max_length=21, null=True, blank=True)
    pass_started_at = models.DateTimeField(null=True, blank=True)
    # The agents ran; the workspace's checks run (PassPhase).
    phase = models.CharField(
        max_length=8, choices=PassPhase.choices, blank=True, default="", db_default=""
    )
    # The next agent's process, at its gate while this one works (recorded by this run's start):
    # it may go before this run's finish is written, so a recovery kills it too.
    next_pid = models.IntegerField(null=True, blank=True)
    next_pgid = models.IntegerField(null=True, blank=True)
    next_process_started_at = models.FloatField(null=True, blank=True)

    objects = TaskQueueQuerySet.as_manager()

    class Meta:
        db_table = "task_queue"
        indexes = [
            models.Index(fields=["workspace", "status", "is_priority", "updated_at"]),
            models.Index(fields=["task", "status", "updated_at"]),
            models.Index(fields=["status", "updated_at"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["task"], condition=Q(status="queued"), name="one_queued_item_per_task"
            ),
            choices_check("status", QueueStatus.choices),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} {self.status}"
