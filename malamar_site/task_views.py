"""Tasks pages (htmx fragments): the Kanban board and the task detail popup.

Thin: parse → service → fragment. Every change answers with the fragment it changed; the
live event the change publishes refreshes the rest (the board, the popup's other parts) in this
tab and every other one (README "Live refreshes").
"""

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import reswap, retarget, trigger_client_event

from core.actors import USER
from core.errors import ServiceError
from core.forms import apply_service_error
from core.htmx import gone, merge_choice, refused, toast
from malamar_site.workspace_page import DETAIL as PAGE
from malamar_site.workspace_page import INVALID, workspace_page_context
from runner import changes as change_reads
from runner.selectors import run_timelines
from tasks import selectors, services
from tasks.forms import (
    BranchDiscardForm,
    CommentForm,
    DeleteDoneForm,
    DescriptionForm,
    LineCommentDraftForm,
    ReviewForm,
    SummaryForm,
)
from tasks.models import LineCommentDraft, Task, TaskStatus
from tasks.pages import (
    DONE_ID,
    blockers_form,
    board_context,
    board_filters_from,
    changes_context,
    composer_context,
    create_form,
    detail_context,
    drafts_context,
    file_diff_context,
    show_all_from,
)
from workspaces.links import workspace_tab_url
from workspaces.models import Workspace

BOARD = "tasks/board.html"
DETAIL = "tasks/detail.html"


def _board_url(workspace_id: str, task_id: str | None = None) -> str:
    return workspace_tab_url(workspace_id, "tasks", task=task_id)


def _no_swap() -> HttpResponse:
    """An answer that changes nothing in place (its HX-Trigger events do the work). Aimed
    outside the dialog that sent it: app.js reopens a dialog that a response lands in."""
    return reswap(retarget(HttpResponse(), "#task-board"), "none")


def _task_or_404(task_id: str) -> Task:
    task = selectors.task_for_detail(task_id)
    if task is None:
        raise Http404("Task not found")
    return task


# The board's search box and filter form (the request they send keeps the page's address
# in step: a reload shows the same tasks).
FILTER_CONTROLS = ("board-filters", "board-search")


@require_GET
@vary_on_headers("HX-Request")
def board_view(request, workspace_id: str):
    """The board's columns (a live refresh, a search or filter), the filters in the query."""
    workspace = get_object_or_404(Workspace, id=workspace_id)
    try:
        filters = board_filters_from(request.GET)
    except ServiceError as error:
        return refused(error.message) if request.htmx else redirect(_board_url(workspace.id))
    if not request.htmx:
        return redirect(workspace_tab_url(workspace.id, "tasks", **filters.params()))
    context = board_context(workspace, show_all=show_all_from(request), filters=filters)
    response = render(request, f"{BOARD}#board", context)
    if request.htmx.trigger in FILTER_CONTROLS:
        response["HX-Replace-Url"] = workspace_tab_url(workspace.id, "tasks", **filters.params())
    return response


@require_GET
@vary_on_headers("HX-Request")
def column_view(request, workspace_id: str, status: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    if status not in TaskStatus.values:
        raise Http404("No such column")
    if not request.htmx:
        return redirect(_board_url(workspace.id))
    try:
        filters = board_filters_from(request.GET)
    except ServiceError as error:
        return refused(error.message)
    show_all = request.GET.get("all") == "1"
    column = selectors.board_column(workspace, status, show_all=show_all, filters=filters)
    return render(request, f"{BOARD}#column", {"workspace": workspace, "column": column})


@require_GET
@vary_on_headers("HX-Request")
def task_move_choices(request, task_id: str):
    """A card's move dialog (its grip): the columns it may go to, and those it may not."""
    task = get_object_or_404(Task, id=task_id)
    if not request.htmx:
        return redirect(_board_url(task.workspace_id))
    context = {"task": task, "choices": selectors.move_choices(task)}
    return render(request, f"{BOARD}#move_choices", context)


def _move(task: Task, status: str, merge: str | None) -> str:
    """A card dropped on a column (or moved from its menu): the status move, or, to Done with
    the person's merge choice, the branch task's finish. Returns the toast's words."""
    if status == TaskStatus.DONE and merge in ("0", "1"):
        services.task_finish(task=task, merge=merge == "1", actor=USER)
        return "Merged and finished" if merge == "1" else "Finished without merging"
    services.task_status_set(task=task, status=status, actor=USER)
    return f"Moved to {TaskStatus(status).label}"


@require_POST
def task_move(request, workspace_id: str):
    """Move a card (`task`, `status`, `merge` "1"/"0" for a branch task's finish): answers the
    board as the filters show it. A move the person may not make is refused with the reason;
    to Done with unmerged work on the task's branch, a dialog asks to merge or keep it. Every
    answer closes the dialog the move was chosen in (the card's, the merge choice)."""
    workspace = get_object_or_404(Workspace, id=workspace_id)
    return trigger_client_event(_moved(request, workspace), "malamar:dialog-close", {})


def _moved(request, workspace):
    task = selectors.task_for_detail(request.POST.get("task", ""))
    if task is None or task.workspace_id != workspace.id:
        return refused("This task no longer exists")
    status, merge = request.POST.get("status", ""), request.POST.get("merge")
    try:
        filters = board_filters_from(request.POST)
        note = _move(task, status, merge)
    except services.MergeChoiceRequired:
        return merge_choice(
            request,
            task,
            url=reverse("task_move", args=[workspace.id]),
            values={"task": task.id, "status": TaskStatus.DONE},
            target="#task-board",
            include="#board-filters, #task-board [name=all]",
        )
    except ServiceError as error:  # (a merge git refused)
        return refused(error.message)
    context = board_context(
        workspace, show_all=show_all_from(request, request.POST), filters=filters
    )
    response = render(request, f"{BOARD}#board", context)
    return toast(response, note, detail=task.summary)


@require_GET
def usage_view(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    context = {"usage": selectors.workspace_usage(workspace), "usage_days": selectors.USAGE_DAYS}
    return render(request, f"{BOARD}#usage", context)


def _page_with(request, workspace: Workspace, **extra):
    """The workspace page on the tasks tab (plain form posts without JavaScript)."""
    context = workspace_page_context(request, workspace, "tasks")
    context.update(extra)
    return render(request, PAGE, context, status=INVALID)


@require_POST
def task_create(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    form = create_form(workspace, request.POST)
    if form.is_valid():
        try:
            services.task_create(workspace=workspace, **form.cleaned_data)
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            if not request.htmx:
                return redirect(_board_url(workspace.id))
            response = _no_swap()
            trigger_client_event(response, "malamar:dialog-close", {})
            return toast(response, "Task created")
    if not request.htmx:
        return _page_with(request, workspace, create_form=form, create_open=True)
    return render(request, f"{BOARD}#create_form", {"workspace": workspace, "create_form": form})


@require_GET
def task_create_blockers(request, workspace_id: str):
    """The new-task dialog's "Waits for" list, fresh each time the dialog opens."""
    workspace = get_object_or_404(Workspace, id=workspace_id)
    context = {"workspace": workspace, "create_form": create_form(workspace)}
    return render(request, f"{BOARD}#create_blockers", context)


@require_POST
def tasks_delete_done(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    form = DeleteDoneForm(request.POST, workspace=workspace, auto_id=DONE_ID)
    if form.is_valid():
        # Typing the workspace's name confirms it all, branches kept unmerged included.
        count = services.tasks_delete_done(workspace=workspace, confirm_unmerged=True)
        if not request.htmx:
            return redirect(_board_url(workspace.id))
        response = _no_swap()
        trigger_client_event(response, "malamar:dialog-close", {})
        return toast(response, f"Deleted {count} done task{'s' if count != 1 else ''}")
    if not request.htmx:
        return _page_with(request, workspace, delete_done_form=form, delete_done_open=True)
    context = {"workspace": workspace, "delete_done_form": form}
    return render(request, f"{BOARD}#delete_done_form", context)


# --- task popup -----------------------------------------------------------------------------


def _log_context(task: Task) -> dict:
    return {"task": task, "entries": selectors.activity_entries(task)}


def _activity_context(task: Task) -> dict:
    return {**_log_context(task), "runs": run_timelines(task=task)}


# The popup's parts, by the id of the element htmx swaps one into (HX-Target); anything else
# (the dialog's slot, a plain link) gets the whole popup.
POPUP_PARTS = {
    "task-head": ("head", detail_context),
    "task-description": ("description", lambda task: {"task": task}),
    "task-comments": ("comments", detail_context),
    "task-composer": ("comment_form", composer_context),
    "task-activity": ("activity", _activity_context),
    "task-log": ("log", _log_context),  # live refreshes: activity.js keeps the runs live
}


@require_GET
@vary_on_headers("HX-Request", "HX-Target")
def task_detail(request, task_id: str):
    """The task popup, or the part of it that the request's HX-Target names. Without htmx:
    back to the board with the popup open (404 when the task is gone)."""
    part = POPUP_PARTS.get(request.htmx.target or "") if request.htmx else None
    task = selectors.task_for_detail(task_id)
    if task is None and part:
        return gone("This task was deleted")  # a refresh on its way when it was deleted
    if task is None and request.htmx:
        return render(request, f"{DETAIL}#gone", {"task_id": task_id})
    if task is None:
        raise Http404("Task not found")
    if not request.htmx:
        return redirect(_board_url(task.workspace_id, task.id))
    partial, context_for = part or ("detail", detail_context)
    return render(request, f"{DETAIL}#{partial}", context_for(task))


CHANGES = "tasks/changes.html"


def _change_set(request, task: Task):
    try:
        return change_reads.task_changes(task, request.GET.get("run", "").strip() or None)
    except change_reads.UnknownRun:
        raise Http404("No such run for this task") from None


@require_GET
@vary_on_headers("HX-Request")
def task_changes(request, task_id: str):
    """The Changes tab: the whole task's changes, or one run's (`?run=<id>`)."""

    task = selectors.task_for_detail(task_id)
    if task is None and request.htmx:
        return gone("This task was deleted")
    if task is None:
        raise Http404("Task not found")
    if not request.htmx:
        return redirect(_board_url(task.workspace_id, task.id))
    changes = _change_set(request, task)
    return render(request, f"{CHANGES}#changes", changes_context(task, changes))


@require_GET
@vary_on_headers("HX-Request")
def task_change_file(request, task_id: str):
    """One file's diff: in the tab when it is opened (htmx), or on its own page (a long one)."""
    task = get_object_or_404(Task.objects.select_related("workspace"), id=task_id)
    changes = _change_set(request, task)
    change = change_reads.find_file(changes, request.GET.get("path", ""))
    if change is None:
        raise Http404("This file did not change")
    page = not request.htmx
    limit = change_reads.PAGE_LINES if page else change_reads.FILE_LINES_INLINE + 200
    context = file_diff_context(task, changes, change, max_lines=limit)
    return render(request, CHANGES if page else f"{CHANGES}#file_diff", context)


@require_POST
def task_draft_add(request, task_id: str):
    """A line comment drafted in the Changes tab (its box): the draft under its lines in place
    of the box, and the pending counts. Refused (empty, not In Review): a toast, the box stays."""
    task = _task_or_404(task_id)
    form = LineCommentDraftForm(request.POST)
    if not form.is_valid():
        return refused(" ".join(" ".join(errors) for errors in form.errors.values()))
    data = form.cleaned_data
    try:
        draft = services.line_comment_draft_create(
            task=task,
            path=data["path"],
            side=data["side"],
            line=data["line"],
            end_line=data["end_line"],
            run_id=data["run"],
            body=data["body"],
        )
    except ServiceError as error:
        return refused(error.message)
    if not request.htmx:
        return _not_htmx_back(request, task)
    return render(request, f"{CHANGES}#drafts_changed", drafts_context(task, draft))


@require_POST
def task_draft_delete(request, task_id: str, draft_id: str):
    """A draft's Delete: its row goes (nothing in its place), the counts follow."""
    task = _task_or_404(task_id)
    draft = get_object_or_404(LineCommentDraft, id=draft_id, task=task)
    services.line_comment_draft_delete(draft=draft)
    if not request.htmx:
        return _not_htmx_back(request, task)
    return render(request, f"{CHANGES}#drafts_changed", drafts_context(task))


def _not_htmx_back(request, task: Task):
    return redirect(_board_url(task.workspace_id, task.id))


@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
def task_summary_edit(request, task_id: str):
    task = _task_or_404(task_id)
    if request.method == "GET":
        form = SummaryForm(initial={"summary": task.summary}, auto_id="task_summary_%s")
        return render(request, f"{DETAIL}#summary_form", {"task": task, "summary_form": form})
    form = SummaryForm(request.POST, auto_id="task_summary_%s")
    if form.is_valid():
        try:
            services.task_update(task=task, summary=form.cleaned_data["summary"])
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            if not request.htmx:
                return _not_htmx_back(request, task)
            task = _task_or_404(task.id)
            response = render(request, f"{DETAIL}#head", detail_context(task))
            return reswap(retarget(response, "#task-head"), "innerHTML")
    return render(request, f"{DETAIL}#summary_form", {"task": task, "summary_form": form})


@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
def task_description_edit(request, task_id: str):
    task = _task_or_404(task_id)
    auto_id = "task_description_%s"
    if request.method == "GET":
        initial = {"description": task.description, "description_base": task.description}
        form = DescriptionForm(initial=initial, auto_id=auto_id)
        return render(request, f"{DETAIL}#description_form", {"task": task, "form": form})
    form = DescriptionForm(request.POST, auto_id=auto_id)
    if form.is_valid():
        # An old page without the base field saves as before (no base: no check).
        base = form.cleaned_data["description_base"] if "description_base" in request.POST else None
        try:
            services.task_update(
                task=task, description=form.cleaned_data["description"], description_base=base
            )
        except services.DescriptionChanged as changed:
            current = changed.details["current_description"]
            # The next save is made knowing the current text: it may replace it.
            data = {"description": changed.details["your_description"], "description_base": current}
            context = {"task": task, "form": DescriptionForm(data, auto_id=auto_id)}
            context["current_description"] = current
            return render(request, f"{DETAIL}#description_form", context)
        if not request.htmx:
            return _not_htmx_back(request, task)
        return render(request, f"{DETAIL}#description", {"task": task})
    return render(request, f"{DETAIL}#description_form", {"task": task, "form": form})


@require_POST
def task_comment_add(request, task_id: str):
    task = _task_or_404(task_id)
    form = CommentForm(request.POST, auto_id="task_comment_%s")
    if form.is_valid():
        try:
            services.comment_create_and_send_around(
                task=task, content=form.cleaned_data["content"], actor=USER
            )
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            if not request.htmx:
                return _not_htmx_back(request, task)
            task = _task_or_404(task.id)
            return render(request, f"{DETAIL}#comments", detail_context(task))
    if not request.htmx:
        return _not_htmx_back(request, task)
    # The form with its error, in place (its comment's stand-in goes: app.js, data-pending).
    response = render(request, f"{DETAIL}#comment_form", {"task": task, "comment_form": form})
    return reswap(retarget(response, "#task-comment-form"), "outerHTML")


REVIEW_TOASTS = {
    "request_changes": "Changes requested: the agents take it from here",
    "comment": "Note added: the agents read it on their next pass",
    "approve": "Approved",
}


def _review_toast(result, merge: bool | None) -> str:
    if result.merge is not None:
        return f"Approved and merged into {result.task.branch_base}"
    if result.verdict == "approve" and merge is False:
        return "Approved; the branch is kept, unmerged"
    return REVIEW_TOASTS[result.verdict]


@require_POST
def task_review(request, task_id: str):
    """The In Review composer's verdicts (README "Reviewing a task"): the comment and the
    line comments drafted in the Changes tab go with it. Refused (a merge git refused, a line
    that is gone): the composer says why, keeping what was typed; the drafts stay too."""
    task = _task_or_404(task_id)
    form = ReviewForm(request.POST, auto_id="task_comment_%s")
    if form.is_valid():
        verdict, merge = form.cleaned_data["verdict"]
        try:
            result = services.task_review_submit(
                task=task,
                verdict=verdict,
                body=form.cleaned_data["content"],
                line_comments=form.cleaned_data["line_comments"] or [],
                with_drafts=True,
                merge=merge,
                actor=USER,
            )
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            if not request.htmx:
                return _not_htmx_back(request, task)
            response = render(request, f"{DETAIL}#comments", detail_context(_task_or_404(task.id)))
            trigger_client_event(response, "review:sent", {"task_id": task.id})
            return toast(response, _review_toast(result, merge))
    if not request.htmx:
        messages.error(request, " ".join(" ".join(e) for e in form.errors.values()))
        return _not_htmx_back(request, task)
    # The form with its error, in place (its comment's stand-in goes: app.js, data-pending).
    response = render(request, f"{DETAIL}#comment_form", composer_context(task, form))
    return reswap(retarget(response, "#task-comment-form"), "outerHTML")


def _after_action(request, task: Task, note: str = "", error=None):
    """The refreshed popup head (actions, status) after a status move or priority toggle."""
    if not request.htmx:
        if error is not None:
            messages.error(request, error.message)
        return _not_htmx_back(request, task)
    task = _task_or_404(task.id)
    response = render(request, f"{DETAIL}#head", detail_context(task))
    response = reswap(retarget(response, "#task-head"), "innerHTML")
    if error is not None:
        toast(response, error.message, "error")
    elif note:
        toast(response, note)
    return response


def _task_action(request, task_id: str, action, note: str = ""):
    """Run a service on the task, then refresh the popup head (or toast the refusal)."""
    task = _task_or_404(task_id)
    try:
        action(task)
    except ServiceError as error:
        return _after_action(request, task, error=error)
    return _after_action(request, task, note=note)


@require_POST
def task_status(request, task_id: str):
    """A status move; "done" with `merge` ("1" / "0") is a branch task's finish: merged first,
    or without merging (Done means merged: without it, such a move is refused)."""
    status, merge = request.POST.get("status", ""), request.POST.get("merge")
    if status == TaskStatus.DONE and merge in ("0", "1"):
        return _task_action(
            request,
            task_id,
            lambda task: services.task_finish(task=task, merge=merge == "1", actor=USER),
            note="Merged and finished" if merge == "1" else "Finished without merging",
        )
    return _task_action(
        request,
        task_id,
        lambda task: services.task_status_set(task=task, status=status, actor=USER),
    )


@require_POST
def task_resume(request, task_id: str):
    return _task_action(
        request, task_id, lambda task: services.task_resume(task=task), note="Resumed"
    )


@require_POST
def task_cancel(request, task_id: str):
    return _task_action(
        request, task_id, lambda task: services.task_cancel(task=task), note="Task cancelled"
    )


@require_POST
def task_retry(request, task_id: str):
    return _task_action(
        request, task_id, lambda task: services.task_retry_now(task=task), note="Retrying now"
    )


@require_POST
def task_checks_run(request, task_id: str):
    return _task_action(
        request,
        task_id,
        lambda task: services.task_checks_run(task=task),
        note="Running the checks",
    )


@require_POST
def task_retries_stop(request, task_id: str):
    return _task_action(
        request,
        task_id,
        lambda task: services.task_retries_stop(task=task),
        note="Stopped retrying: the task waits in Todo",
    )


@require_POST
def task_blockers(request, task_id: str):
    """Set what the task waits for (a cycle or another workspace's task: an error toast)."""
    task = _task_or_404(task_id)
    form = blockers_form(task, request.POST)
    if not form.is_valid():
        error = ServiceError(" ".join(form.errors.get("blocked_by", ["Pick tasks of the list"])))
        return _after_action(request, task, error=error)
    ids = form.cleaned_data["blocked_by"]
    return _task_action(
        request,
        task_id,
        lambda task: services.task_blockers_set(task=task, blocker_ids=ids, actor=USER),
        note="Saved what the task waits for",
    )


@require_POST
def task_prioritize(request, task_id: str):
    return _task_action(request, task_id, lambda task: services.task_prioritize_toggle(task=task))


@require_POST
def task_delete(request, task_id: str):
    task = _task_or_404(task_id)
    workspace_id, summary = task.workspace_id, task.summary
    # The popup's confirmation names the branch and its unmerged changes.
    services.task_delete(task=task, confirm_unmerged=True)
    if not request.htmx:
        messages.success(request, f"Deleted “{summary}”")
        return redirect(_board_url(workspace_id))
    response = _no_swap()
    trigger_client_event(response, "malamar:dialog-close", {})
    return toast(response, "Task deleted")


# --- branch per task ----------------------------------------------------------------------


@require_POST
def task_branch_merge(request, task_id: str):
    """ "Merge into <base>": merged → Done; refused (conflicts, a dirty checkout) → the task
    stays, a system comment lists the files and a toast says so."""
    task = _task_or_404(task_id)
    try:
        result = services.task_branch_merge(task=task)
    except ServiceError as error:
        return _after_action(request, task, error=error)
    if result.merged:
        return _after_action(request, task, note=f"Merged into {task.branch_base}")
    why = "files conflict" if result.conflicts else f"{task.branch_base} has uncommitted changes"
    response = _after_action(request, task)
    if request.htmx:
        toast(response, f"Not merged: {why}. The comment lists the files.", "error")
    else:
        messages.error(request, f"Not merged: {why}.")
    return response


@require_POST
def task_branch_discard(request, task_id: str):
    """ "Discard": after the branch name is typed, the worktree and branch go."""
    task = _task_or_404(task_id)
    form = BranchDiscardForm(request.POST, task=task, auto_id="task_discard_%s")
    if not form.is_valid():
        if not request.htmx:
            messages.error(request, "The branch name does not match")
            return _not_htmx_back(request, task)
        context = {"task": task, "discard_form": form}
        response = render(request, "tasks/branch.html#discard_form", context)
        return reswap(retarget(response, "#task-discard-form"), "outerHTML")
    return _task_action(
        request,
        task_id,
        lambda task: services.task_branch_discard(task=task),
        note="Branch discarded",
    )
