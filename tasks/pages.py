"""Contexts of the tasks pages: the board, the task popup, and the workspace page's tasks tab."""

from django.contrib import messages

from tasks import selectors
from tasks.forms import BlockersForm, BranchDiscardForm, CommentForm, DeleteDoneForm, TaskForm
from tasks.models import Task, TaskStatus
from workspaces.models import Workspace

CREATE_ID = "task_new_%s"
DONE_ID = "delete_done_%s"


def show_all_from(request) -> tuple[str, ...]:
    value = request.GET.get("all", "")
    return tuple(s for s in value.split(",") if s in TaskStatus.values)


def board_context(workspace: Workspace, *, show_all: tuple[str, ...] = ()) -> dict:
    return {
        "workspace": workspace,
        "board": selectors.board(workspace, show_all=show_all),
        "usage": selectors.workspace_usage(workspace),
        "usage_days": selectors.USAGE_DAYS,
    }


def create_form(workspace: Workspace, data=None) -> TaskForm:
    choices = selectors.blocker_choices(workspace.id)
    return TaskForm(data, auto_id=CREATE_ID, blocker_choices=choices)


def blockers_form(task: Task, data=None) -> BlockersForm:
    choices = selectors.blocker_choices(task.workspace_id, exclude=task.id)
    initial = {"blocked_by": getattr(task, "blocked_by", None) or selectors.blocked_by_ids(task)}
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
        "comment_form": CommentForm(auto_id="task_comment_%s"),
        "discard_form": BranchDiscardForm(task=task, auto_id="task_discard_%s"),
    }


def task_tab_context(request, workspace) -> dict:
    """Extra context for the workspace detail page when the tasks tab is shown: the board,
    and the task popup to open on load when the URL names one (`?task=<id>`)."""
    context = {
        **board_context(workspace, show_all=show_all_from(request)),
        "create_form": create_form(workspace),
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
