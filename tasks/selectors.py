import functools
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Exists, F, OuterRef, Q, Subquery
from django.db.models.functions import Coalesce, Substr
from django.utils import timezone

from agents.models import Agent
from core.actors import author_name
from core.compiled_queries import compiled_models
from runner.models import AgentRun, RunStatus
from runner.plans import health_key_label
from runner.selectors import cli_broken, usage_totals
from tasks import anchors, branches
from tasks.models import (
    RUNNABLE_STATUSES,
    ChecksStatus,
    LineCommentDraft,
    Task,
    TaskComment,
    TaskDependency,
    TaskLog,
    TaskQueueItem,
    TaskStatus,
)
from tasks.moves import USER_MOVES
from tasks.similarity import rank_similar

# Cards rendered per column; the rest sit behind "Show all N" (2,000 tasks stay fast).
COLUMN_LIMIT = 50
USAGE_DAYS = 30


def task_with_counts(task_id: str) -> Task | None:
    return Task.objects.with_counts().with_pause_state().filter(id=task_id).first()


def agent_names(workspace_id: str) -> dict[str, str]:
    return dict(Agent.objects.filter(workspace_id=workspace_id).values_list("id", "name"))


def comments_for_task(task: Task) -> list[TaskComment]:
    """Oldest first, each with `author_name` ("(Deleted Agent)" when its agent is gone)."""
    names = agent_names(task.workspace_id)
    comments = list(task.comments.order_by("created_at", "id"))
    for comment in comments:
        comment.author_name = author_name(
            comment.author_type, comment.agent_id, names, comment.kind
        )
    return comments


def mark_outdated(task_id: str, comments: list[TaskComment]) -> list[TaskComment]:
    """Line comments get `outdated` (later runs changed their lines; git reads only when the
    task has line comments)."""
    return anchors.mark_outdated(task_id, comments)


def line_comment_text(comment: TaskComment) -> str:
    """A line comment as agents read it: the file, the lines, the quoted code, the comment."""
    return anchors.agent_markdown(comment)


def line_comment_drafts(task: Task) -> list[LineCommentDraft]:
    """The task's drafted line comments, in the order they were written."""
    return list(task.line_comment_drafts.order_by("created_at", "id"))


def comments_with_anchors(task: Task) -> list[TaskComment]:
    """comments_for_task, line comments marked `outdated` when later runs changed their lines."""
    return anchors.mark_outdated(task.id, comments_for_task(task))


def collapse_repeated_errors(comments: list[TaskComment]) -> list[TaskComment]:
    """Identical consecutive error comments as one: the latest of them, with `repeat_count`
    and `first_created_at` (a run failing the same way 50 times reads "50 times, last at …").
    Every comment gets both attributes (1 and its own time when it stands alone)."""
    collapsed: list[TaskComment] = []
    for comment in comments:
        comment.repeat_count, comment.first_created_at = 1, comment.created_at
        previous = collapsed[-1] if collapsed else None
        if (
            previous is not None
            and comment.is_error
            and previous.is_error
            and comment.content == previous.content
        ):
            comment.repeat_count = previous.repeat_count + 1
            comment.first_created_at = previous.first_created_at
            collapsed[-1] = comment
        else:
            collapsed.append(comment)
    return collapsed


def _of_task(model):
    def build(task_id):
        return model.objects.filter(task_id=task_id).order_by("created_at", "id")

    return build


def _task_rows(model, task: Task) -> list:
    """The task's comments or logs, oldest first, each knowing its task (as `task.comments`
    would give them); the SQL compiled once: every pass reads them as it begins."""
    rows = compiled_models((f"task_rows_{model.__name__}",), _of_task(model), task_id=task.id)
    field = model._meta.get_field("task")
    for row in rows:
        field.set_cached_value(row, task)
    return rows


def logs_for_task(task: Task) -> list[TaskLog]:
    return _task_rows(TaskLog, task)


def task_history(task: Task) -> tuple[list[TaskComment], list[TaskLog]]:
    """The comments and activity logs an agent's input shows, oldest first."""
    return _task_rows(TaskComment, task), logs_for_task(task)


def last_agent_comment(task: Task) -> str:
    """What the agents said last on the task ("" when none spoke): an In Review mail quotes it."""
    comment = task.comments.filter(agent_id__isnull=False).order_by("-created_at").first()
    return comment.content if comment else ""


def unmerged_branch_tasks(tasks) -> list[Task]:
    """Of these tasks (a QuerySet), those whose branch holds work its base lacks (git reads,
    only for tasks with a branch Malamar did not merge)."""
    candidates = tasks.exclude(branch_name="").filter(merged_at__isnull=True)
    candidates = candidates.select_related("workspace").order_by("created_at", "id")
    return [
        task
        for task in candidates
        if branches.branch_state(task, task.workspace) == branches.BranchState.UNMERGED
    ]


# --- dependencies ---------------------------------------------------------------------------


def attach_blockers(tasks: list[Task]) -> list[Task]:
    """Give each task `blockers` (the tasks it waits for, with their status, oldest link
    first) and `blocked_by` (their ids), in one query for all of them."""
    by_task: dict[str, list[Task]] = {t.id: [] for t in tasks}
    links = (
        TaskDependency.objects.filter(task_id__in=list(by_task))
        .select_related("blocker")
        .only("task_id", "blocker__id", "blocker__summary", "blocker__status")
        .order_by("created_at", "id")
    )
    for link in links:
        by_task[link.task_id].append(link.blocker)
    for task in tasks:
        task.blockers = by_task[task.id]
        task.blocked_by = [b.id for b in task.blockers]
        task.open_blockers = [b for b in task.blockers if b.status != TaskStatus.DONE]
        task.is_waiting = task.status == TaskStatus.TODO and bool(task.open_blockers)
    return tasks


def paused_count(workspace_id: str) -> int:
    """Todo tasks of the workspace that wait for the person to resume them."""
    return Task.objects.filter(workspace_id=workspace_id).paused().count()


def blocked_by_ids(task: Task) -> list[str]:
    return attach_blockers([task])[0].blocked_by


def dependents_of(task: Task) -> list[Task]:
    """The tasks that wait for `task`."""
    return list(Task.objects.filter(blocker_links__blocker=task).order_by("created_at", "id"))


def blocker_choices(workspace_id: str, *, exclude: str | None = None) -> list[tuple[str, str]]:
    """(id, label) of the workspace's tasks a task could wait for, newest first."""
    tasks = Task.objects.filter(workspace_id=workspace_id).by_recent_update()
    if exclude:
        tasks = tasks.exclude(id=exclude)
    return [
        (task_id, f"{summary} ({TaskStatus(status).label})")
        for task_id, summary, status in tasks.values_list("id", "summary", "status")[:500]
    ]


# --- board ----------------------------------------------------------------------------------


@dataclass
class Column:
    status: str
    label: str
    total: int
    tasks: list[Task] = field(default_factory=list)
    show_all: bool = False

    @property
    def hidden(self) -> int:
        return max(0, self.total - len(self.tasks))

    @property
    def moves(self) -> str:
        """The columns the person may move this column's cards to (tasks/moves.py)."""
        return " ".join(sorted(USER_MOVES.get(self.status, ())))


ERROR_TEXT_CHARS = 300


def with_error_state(queryset):
    """Annotate what a failing task's card and popup show: the start of its latest error comment
    (`last_error`) and whether a retry is queued (`retry_queued`)."""
    latest_error = (
        TaskComment.objects.errors()
        .filter(task_id=OuterRef("pk"))
        .order_by("-created_at", "-id")
        .values("content")[:1]
    )
    return queryset.annotate(
        last_error=Substr(Subquery(latest_error), 1, ERROR_TEXT_CHARS),
        retry_queued=Exists(TaskQueueItem.objects.queued().filter(task_id=OuterRef("pk"))),
    )


@dataclass
class ErrorState:
    """A task whose runs keep failing, in words for its card and popup."""

    failures: int
    headline: str  # the first line of the latest error
    retry_at: datetime | None = None  # when the next try may start (None: not waiting)
    retrying: bool = False  # a retry is queued or running
    running: bool = False
    paused_for: str = ""  # the CLI the retry waits for: its reset (or repair) decides, not us
    paused_reason: str = ""  # why that CLI cannot run ("": it is out of quota)


def error_state(task: Task) -> ErrorState | None:
    """None unless the task is Todo / In Progress and its last runs failed. Needs the
    `with_counts()` and `with_error_state()` annotations (and `with_waiting_cli()` to tell a
    retry paused by a usage limit)."""
    if not task.failure_streak or task.status not in RUNNABLE_STATUSES:
        return None
    text = (getattr(task, "last_error", None) or "").strip()
    headline = text.splitlines()[0].strip() if text else "The last run failed"
    running = bool(getattr(task, "is_processing", False))
    queued = bool(getattr(task, "retry_queued", False))
    retry_at = task.retry_not_before if queued and not running else None
    paused_for = "" if running else waiting_cli_label(task)
    if paused_for or (retry_at is not None and retry_at <= timezone.now()):
        retry_at = None
    return ErrorState(
        failures=task.failure_streak,
        headline=headline,
        retry_at=retry_at,
        retrying=queued or running,
        running=running,
        paused_for=paused_for,
        paused_reason=getattr(task, "waiting_reason", "") if paused_for else "",
    )


def waiting_cli_label(task: Task) -> str:
    """The name of the CLI the task waits for ("" if none; `with_waiting_cli()`)."""
    waiting = getattr(task, "waiting_for_cli", None)
    return health_key_label(waiting) if waiting else ""


def attach_cli_waits(tasks: list[Task]) -> None:
    """Give each task `waiting_label` (the CLI its pass waits for, "" if none) and
    `waiting_reason` (why that CLI cannot run; "" when it is out of quota): "Waits for Codex
    CLI: not logged in". One read, only when a task waits (`with_waiting_cli()`)."""
    waiting = {getattr(task, "waiting_for_cli", None) for task in tasks} - {None, ""}
    broken = cli_broken() if waiting else {}
    for task in tasks:
        task.waiting_label = waiting_cli_label(task)
        task.waiting_reason = broken.get(getattr(task, "waiting_for_cli", None) or "", "")


def with_change_totals(tasks):
    """`changes_files`, `changes_added`, `changes_removed`: what the task changed from its first
    snapshot to its latest (stored on its runs by the worker; None before any)."""
    latest = AgentRun.objects.filter(task_id=OuterRef("pk"), task_files_changed__isnull=False)
    latest = latest.order_by("-started_at")
    return tasks.annotate(
        changes_files=Subquery(latest.values("task_files_changed")[:1]),
        changes_added=Subquery(latest.values("task_lines_added")[:1]),
        changes_removed=Subquery(latest.values("task_lines_removed")[:1]),
    )


@functools.cache
def _card_queryset():
    """What a card shows (a card never shows the description: agents' can be long). Built once
    (its eight subqueries took ~2.5 ms to build on every board): never evaluated itself, each
    board filters a copy of it."""
    tasks = Task.objects.defer("description").with_counts().by_recent_update()
    return with_change_totals(with_waiting_cli(with_error_state(tasks)))


def with_waiting_cli(queryset):
    """Annotate `waiting_for_cli`: the CLI out of quota the task's paused pass waits for ("" or
    None when it waits for nothing), for the card's chip (DESIGN "Usage limits")."""
    waiting = (
        TaskQueueItem.objects.queued()
        .filter(task_id=OuterRef("pk"))
        .exclude(waiting_for_cli="")
        .values("waiting_for_cli")[:1]
    )
    return queryset.annotate(waiting_for_cli=Subquery(waiting))


def running_runs(workspace_id: str) -> dict[str, AgentRun]:
    """The newest running agent run of each task of the workspace (what the agent does now)."""
    runs = AgentRun.objects.filter(
        workspace_id=workspace_id, task_id__isnull=False, status=RunStatus.RUNNING
    ).order_by("started_at")
    return {run.task_id: run for run in runs.only("id", "task_id", "agent_name", "current_action")}


def _attach_runs(tasks: list[Task], runs: dict[str, AgentRun]) -> None:
    attach_blockers(tasks)
    attach_cli_waits(tasks)
    for task in tasks:
        task.current_run = runs.get(task.id) if task.is_processing else None
        task.error_state = error_state(task)


@dataclass(frozen=True)
class BoardFilters:
    """What the board shows ("" / False: everything): tasks whose summary, description or a
    comment contains `query`, that `agent` ran on, failing, with changes, or waiting (for other
    tasks or for a CLI)."""

    query: str = ""
    agent: str = ""
    failing: bool = False
    changes: bool = False
    waiting: bool = False

    @property
    def active(self) -> bool:
        return any((self.query, self.agent, self.failing, self.changes, self.waiting))

    def params(self) -> dict[str, str]:
        """As the board's address has them (`?q=…&failing=1`), the empty ones left out."""
        flags = {"failing": self.failing, "changes": self.changes, "waiting": self.waiting}
        values = {"q": self.query, "agent": self.agent}
        values.update({name: "1" for name, on in flags.items() if on})
        return {name: value for name, value in values.items() if value}


NO_FILTERS = BoardFilters()


def filtered(tasks, filters: BoardFilters):
    """`tasks` narrowed to those the filters keep, in the same query (correlated subqueries:
    the board's number of queries does not change)."""
    if filters.query:
        words = filters.query
        said = TaskComment.objects.filter(task_id=OuterRef("pk"), content__icontains=words)
        tasks = tasks.filter(
            Q(summary__icontains=words) | Q(description__icontains=words) | Exists(said)
        )
    if filters.agent:
        ran = AgentRun.objects.filter(task_id=OuterRef("pk"), agent_id=filters.agent)
        tasks = tasks.filter(Exists(ran))
    if filters.failing:
        tasks = tasks.filter(status__in=RUNNABLE_STATUSES, failure_streak__gt=0)
    if filters.changes:  # as the card's changes badge counts: its runs' latest totals
        latest = AgentRun.objects.filter(task_id=OuterRef("pk"), task_files_changed__isnull=False)
        latest = latest.order_by("-started_at").values("task_files_changed")[:1]
        tasks = tasks.alias(files_changed=Subquery(latest)).filter(files_changed__gt=0)
    if filters.waiting:
        blocker = TaskDependency.objects.filter(task_id=OuterRef("pk"))
        blocker = blocker.exclude(blocker__status=TaskStatus.DONE)
        cli = TaskQueueItem.objects.queued().filter(task_id=OuterRef("pk"))
        cli = cli.exclude(waiting_for_cli="")
        tasks = tasks.filter(Q(Exists(blocker), status=TaskStatus.TODO) | Exists(cli))
    return tasks


def _cards(workspace, statuses, show_all, filters=NO_FILTERS) -> dict[str, list[Task]]:
    """The cards the filters keep in these columns, most recently updated first: the first
    COLUMN_LIMIT of each, every task of the columns in `show_all`. Three queries whatever the
    number of columns and tasks: the cards, their blockers, the running runs."""
    shown = Q(workspace=workspace, status__in=[status for status in statuses if status in show_all])
    for status in statuses:
        if status not in show_all:
            first = Task.objects.filter(workspace=workspace, status=status)
            first = filtered(first, filters).by_recent_update()
            shown |= Q(id__in=first.values("id")[:COLUMN_LIMIT])
    tasks = list(filtered(_card_queryset().filter(shown), filters))
    _attach_runs(tasks, running_runs(workspace.id))
    cards = {status: [] for status in statuses}
    for task in tasks:
        cards[task.status].append(task)
    return cards


def board_column(workspace, status: str, *, show_all: bool = False, filters=NO_FILTERS) -> Column:
    total = filtered(Task.objects.filter(workspace=workspace, status=status), filters).count()
    cards = _cards(workspace, [status], [status] if show_all else [], filters)
    return Column(status, TaskStatus(status).label, total, cards[status], show_all)


def board(workspace, *, show_all: tuple[str, ...] = (), filters=NO_FILTERS) -> dict:
    """The four columns (most recently updated first) of the tasks the filters keep, in a fixed
    number of queries."""
    counts = dict(
        filtered(Task.objects.filter(workspace=workspace), filters)
        .order_by()
        .values_list("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    cards = _cards(workspace, TaskStatus.values, show_all, filters)
    columns = [
        Column(status, label, counts.get(status, 0), cards[status], status in show_all)
        for status, label in TaskStatus.choices
    ]
    return {"columns": columns, "total": sum(counts.values()), "filters": filters}


# --- usage ----------------------------------------------------------------------------------


def usage_summary(runs) -> dict | None:
    """Tokens and cost of some agent runs, or None when no run reported any."""
    totals = usage_totals(runs)
    totals["tokens"] = totals["input_tokens"] + totals["output_tokens"]
    return totals if totals["tokens"] or totals["cost_usd"] else None


def workspace_usage(workspace, days: int = USAGE_DAYS) -> dict | None:
    since = timezone.now() - timedelta(days=days)
    return usage_summary(AgentRun.objects.filter(workspace=workspace, started_at__gte=since))


def task_usage(task: Task) -> dict | None:
    return usage_summary(AgentRun.objects.filter(task=task))


# --- task detail ----------------------------------------------------------------------------


def comments_for_detail(task: Task) -> list[TaskComment]:
    """Oldest first, with `author_name` (and `outdated` for line comments); identical
    consecutive errors collapsed into one."""
    return collapse_repeated_errors(comments_with_anchors(task))


def task_for_detail(task_id: str) -> Task | None:
    tasks = with_waiting_cli(
        with_error_state(Task.objects.with_counts().with_pause_state().select_related("workspace"))
    )
    return tasks.filter(id=task_id).first()


def current_run(task: Task) -> AgentRun | None:
    if not getattr(task, "is_processing", False):
        return None
    runs = AgentRun.objects.filter(task=task, status=RunStatus.RUNNING)
    return runs.order_by("-started_at").first()


def move_choices(task: Task) -> list[dict]:
    """The move dialog of a card: every other column, those the person may not move it to
    marked refused (the server says why when one is chosen), the first allowed one focused."""
    moves = USER_MOVES.get(task.status, set())
    choices = [
        {"status": status, "label": label, "refused": status not in moves, "first": False}
        for status, label in TaskStatus.choices
        if status != task.status
    ]
    first = next((choice for choice in choices if not choice["refused"]), choices[0])
    first["first"] = True
    return choices


# The popup's action buttons per status (SPECS "Task Actions").
def task_actions(task: Task) -> dict:
    moves = USER_MOVES.get(task.status, set())
    actions = {
        "cancel": task.status == TaskStatus.IN_PROGRESS,
        "to_review": TaskStatus.IN_REVIEW in moves,
        "to_todo": TaskStatus.TODO in moves,
        "to_done": TaskStatus.DONE in moves,
        # Same rule as task_prioritize_toggle: only runnable tasks gain a priority.
        "prioritize": task.status in RUNNABLE_STATUSES or task.is_priority,
        # Branch per task: merge or discard the task's branch once it waits for the user (not
        # once merged: no second merge, nothing to discard).
        "branch": bool(task.branch_name)
        and task.merged_at is None
        and task.status in (TaskStatus.IN_REVIEW, TaskStatus.DONE),
        # Done means merged: an In Review branch task finishes by merging (above) or, by the
        # person's choice, without merging ("Move to Done" would ask).
        "finish_unmerged": bool(task.branch_name)
        and task.merged_at is None
        and task.status == TaskStatus.IN_REVIEW,
        # Imported work and stopped retries wait in Todo until the person resumes them.
        "resume": bool(getattr(task, "is_paused", False)),
        # The workspace's checks, by hand, on a task that waits for the person.
        "run_checks": task.status == TaskStatus.IN_REVIEW
        and bool(task.workspace.checks)
        and not getattr(task, "is_processing", False),
    }
    actions["primary"] = _primary_action(task, actions)
    return actions


def _primary_action(task: Task, actions: dict) -> str:
    """The one action the popup's head shows on a phone's single line (the rest in its menu)."""
    if actions["resume"]:
        return "resume"
    if task.status == TaskStatus.IN_REVIEW:
        return "done"
    if actions["cancel"]:
        return "cancel"
    return "todo" if actions["to_todo"] else ""


def _status_label(value: str) -> str:
    try:
        return TaskStatus(value).label
    except ValueError:
        return value or "?"


def _branch_texts(actor: str, meta: dict) -> dict[str, str]:
    """Branch per task's activity entries, by event type."""
    branch, base = meta.get("branch", ""), meta.get("base", "")
    code = meta.get("exit_code")
    return {
        "branch_created": f"{actor} made branch {branch} from {base}",
        "branch_committed": f"{actor} committed {str(meta.get('commit', ''))[:8]} on {branch}",
        "branch_merged": f"{actor} merged {branch} into {base} ({meta.get('how', '')})",
        "branch_discarded": f"{actor} discarded branch {branch}",
        "branch_kept": f"{actor} finished without merging {branch} (the branch is kept)",
        "setup_ran": (
            f"Setup command `{meta.get('command', '')}` "
            + ("succeeded" if code == 0 else f"failed (exit code {code})")
        ),
    }


REVIEW_WORDS = {
    "approve": "approved",
    "request_changes": "requested changes",
    "comment": "left a review note",
}


def _review_text(actor: str, meta: dict) -> str:
    said = REVIEW_WORDS.get(meta.get("verdict", ""), "reviewed")
    lines = meta.get("line_comments") or 0
    extra = f" ({lines} line comment{'s' if lines != 1 else ''})" if lines else ""
    return f"{actor} {said}{extra}"


def _names(names) -> str:
    return ", ".join(str(name) for name in names or [] if not isinstance(name, dict)) or "?"


def check_duration(seconds) -> str:
    """A check's duration as people read it ("0.4 s", "12 s", "2 min 5 s")."""
    if seconds is None:
        return "?"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def _durations(checks) -> str:
    rows = [c for c in checks or [] if isinstance(c, dict)]  # (every text is built: any log)
    return ", ".join(f"{c.get('name')} ({check_duration(c.get('duration'))})" for c in rows)


def activity_entries(task: Task) -> list[dict]:
    """The task's activity log in words, oldest first ("Reviewer finished: comment")."""
    names = agent_names(task.workspace_id)
    entries = []
    for log in logs_for_task(task):
        meta = log.metadata or {}
        actor = author_name(log.actor_type, log.actor_id, names)
        if log.actor_type == "agent":  # the name it had then, if the log recorded it
            actor = meta.get("agent_name") or actor
        text = {
            "task_created": f"{actor} created the task",
            "status_changed": f"{actor} moved to {_status_label(meta.get('new_status', ''))}",
            "comment_added": f"{actor} commented",
            "agent_started": f"{actor} started",
            "agent_finished": (
                f"{actor} finished: {meta.get('action_type', '').replace('_', ' ')}"
            ),
            "task_cancelled": f"{actor} cancelled the task",
            "task_prioritized": f"{actor} prioritized the task",
            "task_deprioritized": f"{actor} removed the priority",
            "retry_requested": f"{actor} retried the failing task now",
            "retries_stopped": f"{actor} stopped the retries",
            "pass_resumed": f"Resumed at {meta.get('agent_name', '?')} after a restart",
            "waits_for_cli": (
                f"{meta.get('agent_name', '?')} waits for "
                f"{health_key_label(meta.get('cli', '?'))}: {meta.get('reason', '')}"
            ),
            "review_postponed": (
                f"{actor} asked for review, but a comment came while it worked: the agents go "
                "around again"
            ),
            "blocker_added": f"{actor} made it wait for “{meta.get('blocker_summary', '?')}”",
            "blocker_removed": (
                f"{actor} removed the wait for “{meta.get('blocker_summary', '?')}”"
            ),
            "blocker_deleted": (
                f"“{meta.get('blocker_summary', '?')}”, which it waited for, was deleted"
            ),
            "unblocked": "No longer waiting for other tasks: it can start",
            "review_submitted": _review_text(actor, meta),
            "task_resumed": f"{actor} resumed the task",
            "checks_started": f"Checks: running {_names(meta.get('checks'))}",
            "checks_passed": f"Checks passed: {_durations(meta.get('checks'))}",
            "checks_failed": (
                f"Check “{meta.get('name', '?')}” failed (round {meta.get('rounds', '?')}): "
                "the agents go around again"
            ),
            "checks_requested": f"{actor} ran the checks by hand",
            "checks_run_by_hand": (
                "Checks run by hand: passed"
                if meta.get("passed")
                else f"Checks run by hand: “{meta.get('name', '?')}” failed"
            ),
            "checks_failing": (
                f"Checks failing after {meta.get('rounds', '?')} rounds: In Review for you"
            ),
            "blocked_again": (
                f"Waiting again: “{meta.get('blocker_summary', '?')}” is no longer Done"
            ),
            **_branch_texts(actor, meta),
        }.get(log.event_type, f"{actor}: {log.event_type.replace('_', ' ')}")
        entry = {"log": log, "text": text, "actor_type": log.actor_type}
        if log.event_type == "setup_ran":
            entry["output"] = meta.get("output") or "(no output)"
        entries.append(entry)
    return entries


# --- agents' look-ups (`malamar mcp`) -------------------------------------------------------

RELATED_DESCRIPTION_CHARS = 4000  # enough words to compare; a huge description costs nothing


SEARCH_QUERY_MAX = 1000  # characters of a task search (MCP's search_tasks)


def tasks_matching(workspace_id: str, *, query: str = "", status: str | None = None):
    """A workspace's tasks, most recently updated first, whose summary or description contains
    `query` (case-insensitive; empty: all) and, if given, with that status."""
    tasks = Task.objects.filter(workspace_id=workspace_id).with_counts().by_recent_update()
    if status:
        tasks = tasks.filter(status=status)
    query = (query or "").strip()
    # No stored text holds a NUL (and PostgreSQL refuses it in a pattern); SQLite refuses LIKE
    # patterns over 50,000 bytes: callers refuse longer queries with a message.
    if "\x00" in query or len(query) > SEARCH_QUERY_MAX:
        return tasks.none()
    if query:
        tasks = tasks.filter(Q(summary__icontains=query) | Q(description__icontains=query))
    return tasks


def task_dependencies(task: Task) -> dict[str, list[dict]]:
    """The tasks `task` waits for and the ones waiting for it, as {id, summary, status}."""

    def brief(other: Task) -> dict:
        return {"id": other.id, "summary": other.summary, "status": other.status}

    return {
        "blocked_by": [brief(blocker) for blocker in attach_blockers([task])[0].blockers],
        "blocks": [brief(dependent) for dependent in dependents_of(task)],
    }


def related_tasks(task: Task | None, *, workspace_id: str, text: str = "", limit: int = 5):
    """(task, similarity) pairs of the workspace's tasks closest to `task`'s summary and
    description (or to `text`), best first, `task` itself left out."""
    query = f"{task.summary}\n{task.description}" if task else text
    rows = Task.objects.filter(workspace_id=workspace_id)
    if task:
        rows = rows.exclude(id=task.id)
    documents = [
        (task_id, f"{summary}\n{description}")
        for task_id, summary, description in rows.values_list(
            "id", "summary", Substr("description", 1, RELATED_DESCRIPTION_CHARS)
        )
    ]
    ranked = rank_similar(query, documents, limit=limit)
    found = Task.objects.in_bulk([task_id for task_id, _score in ranked])
    return [(found[task_id], score) for task_id, score in ranked if task_id in found]


# --- "Needs you" (across workspaces) --------------------------------------------------------


def in_review_oldest_first(limit: int) -> list[Task]:
    """Tasks In Review in every workspace, oldest first by when they entered In Review
    (`in_review_since`), with their workspace and `may_need_merge_choice` (a branch Malamar
    has not merged: Approve may ask). One query."""
    entered = (
        TaskLog.objects.filter(
            task_id=OuterRef("pk"),
            event_type="status_changed",
            metadata__new_status=TaskStatus.IN_REVIEW,
        )
        .order_by("-created_at")
        .values("created_at")[:1]
    )
    tasks = list(
        Task.objects.with_counts()
        .with_pause_state()
        .filter(status=TaskStatus.IN_REVIEW)
        .select_related("workspace")
        .annotate(in_review_since=Coalesce(Subquery(entered), F("updated_at")))
        .order_by("in_review_since", "id")[:limit]
    )
    for task in tasks:
        task.may_need_merge_choice = bool(task.branch_name) and task.merged_at is None
    return tasks


def _troubled(tasks):
    """Of `tasks`, the Todo / In Progress ones whose runs fail or that wait for a CLI."""
    waits = TaskQueueItem.objects.queued().filter(task_id=OuterRef("pk"))
    waits = waits.exclude(waiting_for_cli="")
    return tasks.filter(status__in=RUNNABLE_STATUSES).filter(
        Q(failure_streak__gt=0) | Exists(waits)
    )


def in_review_of_workspace(workspace_id: str, limit: int = 20) -> list[Task]:
    """The workspace's tasks In Review, oldest first (what the Malamar agent may review)."""
    tasks = Task.objects.filter(workspace_id=workspace_id, status=TaskStatus.IN_REVIEW)
    return list(tasks.order_by("updated_at", "id")[:limit])


def in_trouble(limit: int) -> list[Task]:
    """Todo / In Progress tasks in every workspace whose runs fail, or that wait for a CLI
    (out of quota or unable to run), longest waiting first, each with `error_state`,
    `waiting_label` and `waiting_reason`. One query, and one more when a task waits."""
    tasks = list(
        _troubled(with_waiting_cli(with_error_state(Task.objects.with_counts().with_pause_state())))
        .select_related("workspace")
        .order_by("updated_at", "id")[:limit]
    )
    attach_cli_waits(tasks)
    for task in tasks:
        task.error_state = error_state(task)
    return tasks


def needing_you_counts() -> tuple[int, int, int]:
    """(In Review, of those the ones whose checks fail, failing or waiting for a CLI) in every
    workspace: two COUNT queries."""
    failing = Count("id", filter=Q(checks_status=ChecksStatus.FAILING))
    review = Task.objects.filter(status=TaskStatus.IN_REVIEW).aggregate(
        all=Count("id"), failing=failing
    )
    return review["all"], review["failing"], _troubled(Task.objects.all()).count()


def working_count() -> int:
    """Tasks In Progress in every workspace ("Nothing needs you. Agents are working on N")."""
    return Task.objects.filter(status=TaskStatus.IN_PROGRESS).count()
