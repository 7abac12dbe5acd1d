"""Contexts of the tasks pages: the board, the task popup, and the workspace page's tasks tab."""

from django.contrib import messages
from django.template.loader import render_to_string

from core.errors import ValidationFailed
from runner import changes as change_reads
from tasks import selectors
from tasks.forms import (
    BlockersForm,
    BoardFilterForm,
    BranchDiscardForm,
    CommentForm,
    DeleteDoneForm,
    ReviewForm,
    TaskForm,
)
from tasks.models import Task, TaskStatus
from workspaces.models import Workspace

CHANGES = "tasks/changes.html"
CREATE_ID = "task_new_%s"
DONE_ID = "delete_done_%s"


def show_all_from(request, data=None) -> tuple[str, ...]:
    """The columns shown whole: `?all=todo,done`, or one `all` per column (the board's
    refresh sends the hidden `all` input of each expanded column)."""
    values = ",".join((request.GET if data is None else data).getlist("all")).split(",")
    return tuple(s for s in values if s in TaskStatus.values)


def board_filters_from(data) -> selectors.BoardFilters:
    """The board's search and filters from a request's parameters; ValidationFailed (a search
    over 1,000 characters or with a NUL) says what is wrong."""
    form = BoardFilterForm(data)
    if not form.is_valid():
        field, errors = next(iter(form.errors.items()))
        raise ValidationFailed(f"{form[field].label}: {' '.join(errors)}", field=field)
    return form.filters()


def board_context(
    workspace: Workspace,
    *,
    show_all: tuple[str, ...] = (),
    filters: selectors.BoardFilters = selectors.NO_FILTERS,
) -> dict:
    return {
        "workspace": workspace,
        "board": selectors.board(workspace, show_all=show_all, filters=filters),
        "filters": filters,
    }


def create_form(workspace: Workspace, data=None) -> TaskForm:
    choices = selectors.blocker_choices(workspace.id)
    return TaskForm(data, auto_id=CREATE_ID, blocker_choices=choices)


def blockers_form(task: Task, data=None) -> BlockersForm:
    choices = selectors.blocker_choices(task.workspace_id, exclude=task.id)
    blocked_by = getattr(task, "blocked_by", None)  # attach_blockers read it (detail_context)
    initial = {"blocked_by": selectors.blocked_by_ids(task) if blocked_by is None else blocked_by}
    return BlockersForm(data, initial=initial, auto_id="task_blockers_%s", blocker_choices=choices)


def detail_context(task: Task) -> dict:
    run = selectors.current_run(task)
    selectors.attach_blockers([task])
    selectors.attach_cli_waits([task])
    return {
        "task": task,
        "dependents": selectors.dependents_of(task),
        "blockers_form": blockers_form(task),
        "workspace": task.workspace,
        "actions": selectors.task_actions(task),
        "task_usage": selectors.task_usage(task),
        "current_run": run,
        "error_state": selectors.error_state(task),
        "comments": selectors.comments_for_detail(task),
        **composer_context(task),
        "discard_form": BranchDiscardForm(task=task, auto_id="task_discard_%s"),
    }


def task_tab_context(request, workspace) -> dict:
    """Extra context for the workspace detail page when the tasks tab is shown: the board,
    and the task popup to open on load when the URL names one (`?task=<id>`)."""
    try:
        filters = board_filters_from(request.GET)
    except ValidationFailed as error:
        messages.error(request, error.message)
        filters = selectors.NO_FILTERS
    context = {
        **board_context(workspace, show_all=show_all_from(request), filters=filters),
        # The header's usage (its own live refresh: task_usage); the board's refreshes skip it.
        "usage": selectors.workspace_usage(workspace),
        "usage_days": selectors.USAGE_DAYS,
        # Its "Waits for" list (up to 500 tasks) loads when the dialog opens: task_create_blockers.
        "create_form": TaskForm(auto_id=CREATE_ID),
        "delete_done_form": DeleteDoneForm(workspace=workspace, auto_id=DONE_ID),
    }
    task_id = request.GET.get("task", "").strip()
    if task_id:
        task = selectors.task_for_detail(task_id)
        if task is None or task.workspace_id != workspace.id:
            messages.info(request, "That task no longer exists.")
        else:
            context["open_task"] = task
            context.update(detail_context(task))
    return context


def composer_context(task: Task, form=None) -> dict:
    """The popup's footer: the comment box, or for an In Review task the review (its verdicts)."""
    reviewing = task.status == TaskStatus.IN_REVIEW
    if form is None:
        form = (ReviewForm if reviewing else CommentForm)(auto_id="task_comment_%s")
    return {
        "task": task,
        "comment_form": form,
        "actions": selectors.task_actions(task),
        "drafts": selectors.line_comment_drafts(task) if reviewing else [],
    }


# --- the Changes tab: line comments in the diff ------------------------------------------------


def _shown_here(comment, changes) -> bool:
    """Was the line comment made on exactly this diff (its line numbers hold here)?"""
    if comment.anchor_tree != changes.after:
        return False
    return comment.anchor_side == "new" or comment.anchor_run_id == (
        changes.run.id if changes.run else ""
    )


def _line_comments(task: Task, changes) -> dict[str, list]:
    """The task's line comments on the files of these changes, by path (oldest first)."""
    if changes.problem or not changes.files:
        return {}
    paths = {change.path for change in changes.files}
    found: dict[str, list] = {}
    for comment in selectors.comments_with_anchors(task):
        if comment.anchor_path in paths:
            found.setdefault(comment.anchor_path, []).append(comment)
    return found


def _place_comments(task: Task, changes, view, comments: list, drafts=()) -> None:
    """Give a file's view its rows with the line comments made on this diff under their last
    line (`rows`), then the drafts made on it, and the others (made on another snapshot or
    outdated, or on a line the diff does not show) as `other_comments`, shown above the diff."""
    notes: dict[tuple[str, int], str] = {}
    for comment in comments:
        if _shown_here(comment, changes) and not comment.outdated:
            key = (comment.anchor_side, comment.anchor_end_line)
            row = render_to_string(f"{CHANGES}#diff_comment_row", {"comment": comment})
            notes[key] = notes.get(key, "") + row
    shown_run = changes.run.id if changes.run else ""
    for draft in drafts:
        if draft.path == view.change.path and draft.run_id == shown_run:
            row = render_to_string(f"{CHANGES}#draft_row", {"task": task, "draft": draft})
            notes[(draft.side, draft.end_line)] = notes.get((draft.side, draft.end_line), "") + row
    placed: set = set()
    if view.diff is not None and notes:
        view.rows, placed = view.diff.rows_html_with(notes)
    view.other_comments = [
        comment
        for comment in comments
        if (comment.anchor_side, comment.anchor_end_line) not in placed
        or not _shown_here(comment, changes)
        or comment.outdated
    ]


def _drafts(task: Task) -> list:
    return selectors.line_comment_drafts(task) if task.status == TaskStatus.IN_REVIEW else []


def changes_context(task: Task, changes) -> dict:
    """The Changes tab: the files and their diffs, with the task's line comments in them; an
    In Review task's lines take new comments, its drafts shown under their lines."""
    views = change_reads.file_views(changes)
    comments = _line_comments(task, changes)
    drafts = _drafts(task)
    for view in views:
        _place_comments(task, changes, view, comments.get(view.change.path, []), drafts)
    reviewing = task.status == TaskStatus.IN_REVIEW and not changes.problem
    return {
        "task": task,
        "changes": changes,
        "views": views,
        "reviewing": reviewing,
        "drafts": drafts,
    }


def file_diff_context(task: Task, changes, change, *, max_lines: int) -> dict:
    """One file's diff (opened later in the tab, or on its own page), with its line comments."""
    view = change_reads.FileView(change, 0)
    view.diff = change_reads.file_diff(changes, change, max_lines=max_lines)
    comments = _line_comments(task, changes).get(change.path, [])
    _place_comments(task, changes, view, comments, _drafts(task))
    return {"task": task, "changes": changes, "change": change, "diff": view.diff, "view": view}


def drafts_context(task: Task, draft=None) -> dict:
    """The answer to a draft added or deleted: the draft's row (none once deleted), and the
    task's pending count for the Changes tab and the composer."""
    return {"task": task, "draft": draft, "drafts": selectors.line_comment_drafts(task)}
