"""The Tasks tab: board, create, delete done, the task popup and its actions."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.services import agent_delete
from core.actors import SYSTEM, USER, agent_actor
from runner.models import AgentRun, CliHealth
from tasks import selectors, services
from tasks.models import Task, TaskLog, TaskQueueItem
from tests.failures import fail_task
from tests.htmltree import parse
from tests.pages import element_text, elements, field_error_is_tied, html, hx, triggers
from workspaces.services import workspace_create

pytestmark = pytest.mark.django_db


def board_url(workspace) -> str:
    return f"/workspaces/{workspace.id}/?tab=tasks"


def cards(page: str, status: str) -> list[str]:
    """The card summaries of one column, top to bottom."""
    column = parse(page).by_id(f"col-{status}")
    return [summary.text for summary in column.find_all("task-card__summary")]


def flash_messages(page: str) -> list[str]:
    return [item.text for item in parse(page).by_id("flash-messages").find_all(tag="li")]


def description_body(page: str):
    return parse(page).find("task-description__body")


def make_task(workspace, summary, status="todo", minutes_ago=0, **fields) -> Task:
    task = services.task_create(workspace=workspace, summary=summary)
    when = timezone.now() - timedelta(minutes=minutes_ago)
    Task.objects.filter(id=task.id).update(status=status, updated_at=when, **fields)
    task.refresh_from_db()
    return task


def start_run(task, agent_name="Planner", action="Reading files") -> AgentRun:
    TaskQueueItem.objects.filter(task=task).update(status="in_progress")
    return AgentRun.objects.create(
        id=f"run{task.id[:18]}",
        workspace_id=task.workspace_id,
        task=task,
        agent_name=agent_name,
        cli_type="claude",
        started_at=timezone.now(),
        current_action=action,
    )


# --- board ----------------------------------------------------------------------------------


def test_empty_board_offers_create(client, workspace):
    panel = parse(html(client.get(board_url(workspace)))).by_id("tasks-panel")
    assert (panel.tag, panel.attrs["aria-labelledby"]) == ("section", "tab-tasks")
    empty = panel.find("empty-state")
    assert empty.find("empty-state__title").text == "No tasks yet"
    assert empty.find(tag="button", data_dialog_open="task-create-dialog").text == "Create Task"
    assert panel.find("kanban-col") is None


def test_board_columns_ordered_by_recent_update(client, workspace):
    make_task(workspace, "Old todo", minutes_ago=30)
    make_task(workspace, "New todo", minutes_ago=1)
    make_task(workspace, "Working", status="in_progress")
    make_task(workspace, "Review me", status="in_review")
    make_task(workspace, "Finished", status="done")
    page = html(client.get(board_url(workspace)))
    assert cards(page, "todo") == ["New todo", "Old todo"]
    assert cards(page, "in_progress") == ["Working"]
    assert cards(page, "in_review") == ["Review me"]
    assert cards(page, "done") == ["Finished"]
    titles = [title.text for title in parse(page).find_all("kanban-col__title", tag="h3")]
    assert titles == ["Todo", "In Progress", "In Review", "Done"]
    # The board refreshes itself on the live task events (live.js), this workspace's only.
    board = parse(page).by_id("task-board").attrs
    assert board["hx-trigger"] == "live" and board["hx-get"] == f"/workspaces/{workspace.id}/tasks/"
    assert {"task.created", "task.status_changed", "task.deleted"} <= set(
        board["data-live"].split()
    )
    # Cards link to the popup URL (so they work without JavaScript and in a new tab).
    task = Task.objects.get(summary="Finished")
    card = parse(page).by_id(f"task-card-{task.id}").find("task-card", tag="a")
    assert card.attrs["href"] == f"/workspaces/{workspace.id}/?tab=tasks&task={task.id}"
    delete_done = (
        parse(page)
        .by_id("col-done")
        .find(tag="button", data_dialog_open=("task-delete-done-dialog"))
    )
    assert delete_done.attrs["aria-label"] == "Delete all done tasks"


def test_card_shows_badges_and_processing_agent(client, workspace):
    task = make_task(workspace, "Busy", status="in_progress", is_priority=True)
    services.comment_create(task=task, content="hello", actor=USER)
    services.comment_create(task=task, content="again", actor=USER)
    run = start_run(task, "Reviewer", "Running pytest")
    card = parse(html(client.get(board_url(workspace)))).by_id(f"task-card-{task.id}")
    assert "is-working" in card.find("task-card", tag="a").classes
    assert card.find("badge--priority").text == "Priority"
    assert card.find("badge--count").text == "2 comments"
    assert card.find("task-card__agent").text == "Reviewer"
    # The run's id lets a live action newer than this render win over it (activity.js).
    action = card.find("task-card__action")
    assert (action.attrs["data-task-current"], action.attrs["data-current-run"]) == (
        task.id,
        run.id,
    )
    assert action.text == "Running pytest"
    assert card.find("task-card__time").find(tag="time") is not None


def test_board_fragment_and_column_fragment(client, workspace):
    make_task(workspace, "One")
    page = parse(html(hx(client, "get", f"/workspaces/{workspace.id}/tasks/")))
    assert page.find(tag="html") is None and page.find("kanban") is not None
    column = html(hx(client, "get", f"/workspaces/{workspace.id}/tasks/column/todo/"))
    assert column.strip().startswith('<section class="kanban-col status--todo"')
    assert cards(column, "todo") == ["One"]
    # Without htmx, both go back to the tab.
    response = client.get(f"/workspaces/{workspace.id}/tasks/column/todo/")
    assert response.status_code == 302 and response.url.endswith("?tab=tasks")
    assert hx(client, "get", f"/workspaces/{workspace.id}/tasks/column/nope/").status_code == 404
    assert hx(client, "get", "/workspaces/nope/tasks/").status_code == 404


def test_long_columns_show_the_most_recent_and_a_show_all_link(client, workspace, monkeypatch):
    monkeypatch.setattr("tasks.selectors.COLUMN_LIMIT", 3)
    for n in range(5):
        make_task(workspace, f"T{n}", minutes_ago=10 - n)
    page = html(client.get(board_url(workspace)))
    assert cards(page, "todo") == ["T4", "T3", "T2"]
    assert parse(page).by_id("col-todo").find("kanban-col__more").text == "Show all 5"
    column = html(hx(client, "get", f"/workspaces/{workspace.id}/tasks/column/todo/?all=1"))
    assert cards(column, "todo") == ["T4", "T3", "T2", "T1", "T0"]
    assert parse(column).find("kanban-col__more") is None
    # A board refresh keeps the expanded columns (tasks.js names them in `all`).
    board = html(hx(client, "get", f"/workspaces/{workspace.id}/tasks/?all=todo,bogus"))
    assert cards(board, "todo") == ["T4", "T3", "T2", "T1", "T0"]
    # The expanded column says so (tasks.js asks the board's refresh for it expanded).
    assert "data-show-all" in parse(column).by_id("col-todo").attrs
    assert "data-show-all" not in parse(board).by_id("col-in_review").attrs


def board_queries(client, workspace) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = hx(client, "get", f"/workspaces/{workspace.id}/tasks/")
    assert response.status_code == 200
    return len(queries)


def populate(workspace, count: int) -> None:
    """`count` tasks in the four columns, with everything a card may show: comments, a running
    agent, failures, checks, changes, an unmerged branch, a CLI to wait for, other tasks."""
    statuses = ["todo", "in_progress", "in_review", "done"]
    previous = None
    for n in range(count):
        kind, status = n % 8, statuses[n % 4]
        task = make_task(workspace, f"Task {n}", status=status, is_priority=(kind == 0))
        services.comment_create(task=task, content="note", actor=SYSTEM)
        if kind == 1:
            start_run(task)
        elif kind == 2:  # in review
            AgentRun.objects.create(
                id=f"done{task.id[:17]}",
                workspace_id=workspace.id,
                task=task,
                agent_name="Reviewer",
                cli_type="claude",
                status="completed",
                started_at=timezone.now(),
                task_files_changed=2,
                task_lines_added=9,
                task_lines_removed=1,
            )
            Task.objects.filter(id=task.id).update(
                checks_status="passed", checks_result=[{"name": "tests", "duration": 2.5}]
            )
        elif kind == 3:  # done
            Task.objects.filter(id=task.id).update(
                branch_name=f"malamar/{n}", checks_status="failing"
            )
        elif kind == 4:  # todo
            fail(task, times=2)
        elif kind == 5:
            TaskQueueItem.objects.filter(task=task).update(waiting_for_cli="codex")
        elif kind in (0, 6) and previous:  # waiting (todo), then a chain (in review)
            services.task_blockers_set(task=task, blocker_ids=[previous.id], actor=USER)
        previous = task


def test_board_query_count_does_not_grow_with_tasks(client):
    """The board reads a fixed number of queries whatever its number of tasks and what their
    cards show (N and 2N tasks, the larger past the columns' limit)."""
    small = workspace_create(title="Small")
    large = workspace_create(title="Large")
    populate(small, 100)
    populate(large, 200)
    CliHealth.objects.create(cli_type="codex", status="unhealthy", error="Not logged in")
    assert board_queries(client, small) == board_queries(client, large)
    # The full page too.
    with CaptureQueriesContext(connection) as few:
        client.get(board_url(small))
    with CaptureQueriesContext(connection) as many:
        client.get(board_url(large))
    assert len(few) == len(many)


def test_a_board_refresh_reads_each_thing_once(client, workspace):
    """A live refresh of the board (every task event asks for one): the password check, the
    workspace, the column counts, the cards, their running agents, the tasks and the broken
    CLIs they wait for. Seven queries, none twice; the header's usage has its own refresh."""
    populate(workspace, 16)
    with CaptureQueriesContext(connection) as queries:
        response = hx(client, "get", f"/workspaces/{workspace.id}/tasks/")
    assert response.status_code == 200
    statements = [query["sql"] for query in queries]
    assert len(statements) == 7 and len(set(statements)) == 7
    # The whole page reads the password setting once too (its middleware and its header).
    with CaptureQueriesContext(connection) as queries:
        client.get(board_url(workspace))
    assert sum('FROM "settings"' in query["sql"] for query in queries) == 1


def test_cards_show_markup_as_text(client, workspace):
    """The cards are written in Python (tasks/templatetags/task_cards.py), not by the
    template engine that escaped everything: whatever a task, an agent or a branch says is
    shown as text, in the card's text and in its attributes."""
    hostile = "<script>alert(\"x\")</script> & 'quoted'"
    blocker = make_task(workspace, hostile, status="in_progress")
    start_run(blocker, agent_name=hostile, action=hostile)
    waiting = make_task(workspace, "Waits")
    services.task_blockers_set(task=waiting, blocker_ids=[blocker.id], actor=USER)
    make_task(workspace, "Unmerged", status="done", branch_name=hostile)
    page = html(client.get(board_url(workspace)))
    assert "<script>" not in page
    card = parse(page).by_id(f"task-card-{blocker.id}")
    assert card.find("task-card__summary").text == hostile
    assert card.find("task-card__agent").text == hostile
    assert card.find("task-card__action").text == hostile
    assert card.find("task-card__move").attrs["aria-label"] == f"Move “{hostile}” to another column"
    link = parse(page).by_id(f"task-card-{waiting.id}").find("task-card__blocker")
    assert link.text == hostile
    unmerged = parse(page).find("task-card__unmerged")
    assert unmerged.attrs["title"] == f"Finished without merging {hostile}"


def test_the_task_popup_reads_each_thing_once(client, workspace):
    """A task that waits for nothing: its blockers are read once (its "Waits for" form starts
    from what the popup read)."""
    make_task(workspace, "Another")
    task = make_task(workspace, "Alone")
    with CaptureQueriesContext(connection) as queries:
        response = hx(client, "get", f"/tasks/{task.id}/")
    assert response.status_code == 200
    statements = [query["sql"] for query in queries]
    assert len(statements) == len(set(statements)), "a statement ran twice"


def test_the_board_reads_every_column_in_four_queries(workspace, monkeypatch):
    """Counts, the cards of all columns (each its most recently updated first, or all of it
    when shown whole), their blockers, the running runs: four queries for any board."""
    monkeypatch.setattr(selectors, "COLUMN_LIMIT", 3)
    made = {status: [] for status in ("todo", "in_progress", "in_review", "done")}
    for n in range(20):
        for status, tasks in made.items():
            tasks.insert(0, make_task(workspace, f"{status} {n}", status, minutes_ago=100 - n))
    services.task_blockers_set(task=made["todo"][0], blocker_ids=[made["done"][0].id], actor=USER)
    start_run(made["in_progress"][1])

    def summaries(column) -> list[str]:
        return [task.summary for task in column.tasks]

    with CaptureQueriesContext(connection) as queries:
        board = selectors.board(workspace, show_all=("done",))
    assert len(queries) == 4
    columns = {column.status: column for column in board["columns"]}
    for status, tasks in made.items():
        shown = tasks if status == "done" else tasks[:3]
        assert summaries(columns[status]) == [task.summary for task in shown]
        assert columns[status].total == 20
        assert columns[status].show_all == (status == "done")
    assert columns["todo"].tasks[0].blocked_by == [made["done"][0].id]
    assert columns["in_progress"].tasks[1].current_run.current_action == "Reading files"
    with CaptureQueriesContext(connection) as queries:
        column = selectors.board_column(workspace, "in_review")
    assert len(queries) == 4 and summaries(column) == [t.summary for t in made["in_review"][:3]]


def test_usage_in_board_header(client, workspace):
    assert parse(html(client.get(board_url(workspace)))).by_id("tasks-usage").text == ""
    task = make_task(workspace, "Paid")
    run = start_run(task)
    AgentRun.objects.filter(id=run.id).update(
        input_tokens=1_000_000, output_tokens=200_000, cost_usd=3.4
    )
    AgentRun.objects.create(
        id="oldrun", workspace=workspace, task=task, agent_name="X", cli_type="claude",
        started_at=timezone.now() - timedelta(days=40), input_tokens=9_000_000, cost_usd=99,
    )  # fmt: skip
    usage = parse(html(client.get(board_url(workspace)))).by_id("tasks-usage")
    assert usage.text == "Last 30 days: 1.2M tokens · $3.40"
    refreshed = parse(html(client.get(f"/workspaces/{workspace.id}/tasks/usage/")))
    assert refreshed.text == "Last 30 days: 1.2M tokens · $3.40"


# --- create / delete done -------------------------------------------------------------------


def test_create_task(client, workspace):
    url = f"/workspaces/{workspace.id}/tasks/new/"
    data = {"summary": "  Write docs ", "description": "# Docs\n\nAll of them"}
    response = hx(client, "post", url, data)
    assert response.status_code == 200
    task = Task.objects.get(workspace=workspace)
    assert task.summary == "Write docs" and task.description.startswith("# Docs")
    events = triggers(response)
    assert events["malamar:toast"]["message"] == "Task created"
    assert "malamar:dialog-close" in events
    assert set(events) == {"malamar:toast", "malamar:dialog-close"}  # the live event refreshes
    # Nothing is swapped into the dialog (that would reopen it); closing resets the form.
    assert response.headers["HX-Reswap"] == "none"


def test_create_task_requires_summary(client, workspace):
    url = f"/workspaces/{workspace.id}/tasks/new/"
    response = hx(client, "post", url, {"summary": "  ", "description": "keep me"})
    assert response.status_code == 200  # htmx fragments with errors answer 200
    page = html(response)
    assert element_text(page, "task_new_summary_error") == "Summary is required"
    assert parse(page).find(tag="textarea", name="description").text == "keep me"
    assert field_error_is_tied(page, "task_new_summary")
    assert not Task.objects.exists()
    # Without JavaScript: the whole page, with the dialog open.
    response = client.post(url, {"summary": ""})
    assert response.status_code == 422
    assert "data-open-on-load" in parse(html(response)).by_id("task-create-dialog").attrs
    response = client.post(url, {"summary": "No JS"})
    assert response.status_code == 302 and Task.objects.filter(summary="No JS").exists()


def test_delete_all_done_needs_the_workspace_name(client, workspace):
    make_task(workspace, "Done 1", status="done")
    make_task(workspace, "Done 2", status="done")
    keep = make_task(workspace, "Still todo")
    url = f"/workspaces/{workspace.id}/tasks/delete-done/"
    response = hx(client, "post", url, {"confirm_title": "wrong"})
    assert response.status_code == 200
    error = element_text(html(response), "delete_done_confirm_title_error")
    assert "The name does not match" in error
    assert field_error_is_tied(html(response), "delete_done_confirm_title")
    assert Task.objects.filter(status="done").count() == 2
    response = client.post(url, {"confirm_title": "wrong"})  # without JavaScript
    assert response.status_code == 422
    assert "The name does not match" in element_text(
        html(response), "delete_done_confirm_title_error"
    )
    response = hx(client, "post", url, {"confirm_title": workspace.title})
    assert list(Task.objects.filter(workspace=workspace)) == [keep]
    events = triggers(response)
    assert events["malamar:toast"]["message"] == "Deleted 2 done tasks"
    assert "malamar:dialog-close" in events


# --- popup ----------------------------------------------------------------------------------


def test_popup_fragment(client, workspace, agents):
    task = services.task_create(workspace=workspace, summary="Login", description="Use **OAuth**")
    services.comment_create(task=task, content="Plan: *do it*", actor=agent_actor(agents[0]))
    services.comment_create(task=task, content="Looks good", actor=USER)
    services.comment_create(task=task, content="CLI exited with code 1", actor=SYSTEM, kind="error")
    services.comment_create(task=task, content=services.CANCEL_MESSAGE, actor=SYSTEM)
    gone = agents[1]
    services.comment_create(task=task, content="bye", actor=agent_actor(gone))
    agent_delete(agent=gone)
    response = hx(client, "get", f"/tasks/{task.id}/")
    page = parse(html(response))
    assert response.status_code == 200 and page.find(tag="html") is None
    assert page.by_id("task-dialog-title").text == "Login"
    assert page.find("task-description__body").find(tag="strong").text == "OAuth"  # markdown
    comments = page.find_all("comment", tag="li")
    assert comments[0].find("comment__body").find(tag="em").text == "do it"
    authors = [comment.find("comment__author").text for comment in comments]
    assert authors == ["Planner", "User", "System", "System", "(Deleted Agent)"]
    kinds = [comment.attrs["class"] for comment in comments]
    assert kinds == [
        "comment comment--agent",
        "comment comment--user",
        "comment comment--system comment--error",
        "comment comment--system",
        "comment comment--agent",
    ]
    tabs = [tab.text for tab in page.find_all(tag="button", role="tab")]
    assert tabs[:2] == ["Comments", "Activity"]
    assert page.by_id("task-comment-form").tag == "form"
    # Todo: Delete and Prioritize only.
    assert task_actions(page) == ["task-delete", "task-prioritize"]
    assert page.by_id("task-prioritize").text == "Prioritize"


def test_popup_escapes_user_text(client, workspace):
    task = services.task_create(workspace=workspace, summary="<script>x</script>")
    services.comment_create(task=task, content="<img src=x onerror=alert(1)>", actor=USER)
    page = html(hx(client, "get", f"/tasks/{task.id}/"))
    assert "<script>x" not in page and "<img" not in page
    assert parse(page).by_id("task-dialog-title").text == "<script>x</script>"
    assert parse(page).find("comment__body").text == "<img src=x onerror=alert(1)>"


def test_popup_opens_from_the_url(client, workspace):
    task = services.task_create(workspace=workspace, summary="Linked")
    plain = f"/workspaces/{workspace.id}/?task={task.id}"
    for url in (f"{board_url(workspace)}&task={task.id}", plain):
        dialog = parse(html(client.get(url))).by_id("task-dialog")
        assert {"open", "data-open-on-load"} <= dialog.attrs.keys()
        assert dialog.by_id("task-detail").attrs["data-task-detail"] == task.id
    # Without htmx the popup URL sends you to the page that opens it.
    response = client.get(f"/tasks/{task.id}/")
    assert response.status_code == 302 and response.url.endswith(f"&task={task.id}")
    # An unknown task: the board, a note, no popup.
    page = html(client.get(f"{board_url(workspace)}&task=nope"))
    assert parse(page).by_id("task-detail") is None
    assert flash_messages(page) == ["That task no longer exists."]


def task_actions(page) -> list[str]:
    """The task's actions in its header: the primary group and the "More actions" menu."""
    groups = [page.by_id("task-actions"), page.by_id("task-more-actions")]
    buttons = [button for group in groups for button in group.find_all(tag="button")]
    ids = [button.attrs.get("id", "") for button in buttons]
    return sorted(i for i in ids if i.startswith("task-") and i != "task-head-more-toggle")


def test_other_workspace_task_is_not_opened(client, workspace):
    other = workspace_create(title="Other")
    task = services.task_create(workspace=other, summary="Elsewhere")
    page = html(client.get(f"{board_url(workspace)}&task={task.id}"))
    assert parse(page).by_id("task-detail") is None


def test_actions_per_status(client, workspace):
    def buttons(status):
        task = make_task(workspace, f"S {status}", status=status)
        return task_actions(
            parse(html(hx(client, "get", f"/tasks/{task.id}/", target="task-head")))
        )

    assert buttons("todo") == ["task-delete", "task-prioritize"]
    assert buttons("in_progress") == [
        "task-cancel",
        "task-delete",
        "task-move-in_review",
        "task-prioritize",
    ]
    assert buttons("in_review") == ["task-delete", "task-move-done", "task-move-todo"]
    assert buttons("done") == ["task-delete", "task-move-todo"]


def test_working_row_while_an_agent_runs(client, workspace):
    task = make_task(workspace, "Busy", status="in_progress")
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-comments"))
    assert "data-working" not in page
    run = start_run(task, "Implementer", "Editing app.py")
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-comments"))
    working = re.search(r"<li class=\"comment comment--working\".*?</li>", page, re.S)[0]
    assert "<strong>Implementer</strong> is working…" in working
    assert f'data-task-current="{task.id}" data-current-run="{run.id}">Editing app.py<' in working


def test_task_usage_in_popup(client, workspace):
    task = make_task(workspace, "Costly")
    head = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    assert parse(head).find("task-usage") is None
    run = start_run(task)
    AgentRun.objects.filter(id=run.id).update(input_tokens=12_000, output_tokens=345, cost_usd=0.05)
    page = parse(html(hx(client, "get", f"/tasks/{task.id}/", target="task-head")))
    assert page.find("task-usage").text == "12.3k tokens · $0.05"


def test_activity_tab_lists_the_log_in_words_and_the_runs(client, workspace, agents):
    task = services.task_create(workspace=workspace, summary="Log me")
    services.task_prioritize_toggle(task=task)
    actor = agent_actor(agents[2])
    services.log_add(
        task=task, event_type="agent_finished", actor=actor,
        metadata={"agent_name": "Reviewer", "action_type": "comment"},
    )  # fmt: skip
    Task.objects.filter(id=task.id).update(status="in_progress")
    task.refresh_from_db()
    services.task_status_set(task=task, status="in_review", actor=USER)
    start_run(task, "Reviewer")
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-activity"))
    texts = [text.text for text in parse(page).find_all("task-log__text")]
    assert texts == [
        "User created the task",
        "User prioritized the task",
        "Reviewer finished: comment",
        "User moved to In Review",
    ]
    assert f'data-runs-task="{task.id}"' in page and "Reviewer" in page
    log_only = html(hx(client, "get", f"/tasks/{task.id}/", target="task-log"))
    assert "task-log__text" in log_only and "data-runs-task" not in log_only


# --- popup writes ---------------------------------------------------------------------------


def test_edit_summary(client, workspace):
    task = make_task(workspace, "Before")
    form = html(hx(client, "get", f"/tasks/{task.id}/summary/edit/"))
    assert parse(form).find(tag="input", name="summary").attrs["value"] == "Before"
    assert "data-editing" in form
    response = hx(client, "post", f"/tasks/{task.id}/summary/edit/", {"summary": ""})
    assert response.status_code == 200
    assert element_text(html(response), "task_summary_summary_error") == "Summary is required"
    assert field_error_is_tied(html(response), "task_summary_summary")
    response = hx(client, "post", f"/tasks/{task.id}/summary/edit/", {"summary": "After"})
    task.refresh_from_db()
    assert task.summary == "After"
    assert response.headers["HX-Retarget"] == "#task-head"
    assert parse(html(response)).by_id("task-dialog-title").text == "After"
    assert "tasks:changed" not in triggers(response)


def test_edit_description(client, workspace):
    task = make_task(workspace, "Desc")
    form = html(hx(client, "get", f"/tasks/{task.id}/description/edit/"))
    assert parse(form).find(tag="textarea", name="description") is not None
    assert "data-editing" in form
    url = f"/tasks/{task.id}/description/edit/"
    response = hx(client, "post", url, {"description": "Now **bold**"})
    task.refresh_from_db()
    assert task.description == "Now **bold**"
    assert description_body(html(response)).find(tag="strong").text == "bold"
    view = html(hx(client, "get", f"/tasks/{task.id}/", target="task-description"))
    assert description_body(view).find(tag="strong").text == "bold"
    hx(client, "post", url, {"description": ""})
    view = parse(html(hx(client, "get", f"/tasks/{task.id}/", target="task-description")))
    assert view.find("task-description__empty").text == "No description."


def test_add_comment_restarts_a_task_in_review(client, workspace):
    task = make_task(workspace, "Reviewed", status="in_review")
    url = f"/tasks/{task.id}/comments/new/"
    response = hx(client, "post", url, {"content": "Please also **add tests**"})
    assert response.status_code == 200
    [comment] = parse(html(response)).find_all("comment", tag="li")
    assert comment.find("comment__body").find(tag="strong").text == "add tests"
    task.refresh_from_db()
    assert task.status == "todo"
    assert triggers(response) == {}  # the live events refresh the rest


def test_blank_comment_is_refused(client, workspace):
    task = make_task(workspace, "Quiet")
    response = hx(client, "post", f"/tasks/{task.id}/comments/new/", {"content": "  "})
    assert response.status_code == 200
    assert response.headers["HX-Retarget"] == "#task-comment-form"
    # The form with its error, in place: app.js drops the comment's stand-in (data-pending).
    form = parse(html(response)).by_id("task-comment-form")
    assert form.find("field__error").text == "Write a comment first"
    assert form.find(tag="textarea").attrs["aria-invalid"] == "true"
    assert not task.comments.exists()


def test_status_moves(client, workspace):
    task = make_task(workspace, "Mover", status="in_progress")
    TaskQueueItem.objects.filter(task=task).update(status="in_progress")
    url = f"/tasks/{task.id}/status/"
    response = hx(client, "post", url, {"status": "in_review"})
    task.refresh_from_db()
    assert task.status == "in_review"
    assert response.headers["HX-Retarget"] == "#task-head"
    assert parse(html(response)).by_id("task-move-done").text == "Move to Done"
    # The running pass was asked to stop.
    assert TaskQueueItem.objects.filter(task=task, stop_requested_at__isnull=False).exists()
    hx(client, "post", url, {"status": "done"})
    task.refresh_from_db()
    assert task.status == "done"
    hx(client, "post", url, {"status": "todo"})
    task.refresh_from_db()
    assert task.status == "todo"
    # A move the user may not make: an error toast, nothing changes.
    response = hx(client, "post", url, {"status": "done"})
    assert response.status_code == 200
    assert triggers(response)["malamar:toast"]["level"] == "error"
    task.refresh_from_db()
    assert task.status == "todo"
    log = TaskLog.objects.filter(task=task, event_type="status_changed").last()
    assert log.actor_type == "user"


def test_cancel(client, workspace):
    task = make_task(workspace, "Stop me", status="in_progress")
    response = hx(client, "post", f"/tasks/{task.id}/cancel/")
    task.refresh_from_db()
    assert task.status == "in_review"
    assert triggers(response)["malamar:toast"]["message"] == "Task cancelled"
    assert task.comments.filter(content=services.CANCEL_MESSAGE).exists()
    response = hx(client, "post", f"/tasks/{task.id}/cancel/")
    assert triggers(response)["malamar:toast"]["level"] == "error"


def test_prioritize_toggles(client, workspace):
    task = make_task(workspace, "Urgent")
    other = make_task(workspace, "Was urgent", is_priority=True)
    response = hx(client, "post", f"/tasks/{task.id}/prioritize/")
    task.refresh_from_db()
    other.refresh_from_db()
    assert task.is_priority and not other.is_priority
    toggle = parse(html(response)).by_id("task-prioritize")
    assert (toggle.text, toggle.attrs["aria-pressed"]) == ("Remove Priority", "true")
    response = hx(client, "post", f"/tasks/{task.id}/prioritize/")
    task.refresh_from_db()
    toggle = parse(html(response)).by_id("task-prioritize")
    assert not task.is_priority and (toggle.text, toggle.attrs["aria-pressed"]) == (
        "Prioritize",
        "false",
    )


def test_delete_task(client, workspace):
    task = make_task(workspace, "Bye", status="in_review")
    response = hx(client, "post", f"/tasks/{task.id}/delete/")
    assert response.status_code == 200 and not Task.objects.filter(id=task.id).exists()
    events = triggers(response)
    assert "malamar:dialog-close" in events and events["malamar:toast"]["message"] == "Task deleted"
    assert response.headers["HX-Reswap"] == "none"


def test_delete_button_confirms(client, workspace):
    task = make_task(workspace, "Careful")
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    button = re.search(r'<button[^>]*id="task-delete"[^>]*>', page, re.S)[0]
    assert 'data-confirm="Delete this task?"' in button


def test_missing_tasks(client, workspace):
    for method, url in [
        ("post", "/tasks/nope/status/"),
        ("post", "/tasks/nope/cancel/"),
        ("post", "/tasks/nope/prioritize/"),
        ("post", "/tasks/nope/delete/"),
        ("post", "/tasks/nope/comments/new/"),
        ("post", "/tasks/nope/summary/edit/"),
        ("get", "/tasks/nope/description/edit/"),
        ("post", "/workspaces/nope/tasks/new/"),
        ("post", "/workspaces/nope/tasks/delete-done/"),
    ]:
        assert hx(client, method, url).status_code == 404, url
    assert client.get("/tasks/nope/").status_code == 404
    # Opening it by a stale link: the popup says it is gone.
    assert "This task no longer exists" in html(hx(client, "get", "/tasks/nope/"))
    # A live refresh of a popup part whose task was deleted meanwhile: 200, nothing swapped,
    # and the popup closes saying so.
    for part in ("task-head", "task-comments", "task-activity", "task-description", "task-log"):
        response = hx(client, "get", "/tasks/nope/", target=part)
        assert response.status_code == 200 and response.headers["HX-Reswap"] == "none", part
        assert triggers(response) == {"malamar:gone": {"message": "This task was deleted"}}
    response = hx(client, "get", "/tasks/nope/changes/")
    assert triggers(response)["malamar:gone"] == {"message": "This task was deleted"}


def test_get_not_allowed_on_writes(client, workspace):
    task = make_task(workspace, "Read only")
    assert client.get(f"/tasks/{task.id}/delete/").status_code == 405
    assert client.get(f"/workspaces/{workspace.id}/tasks/new/").status_code == 405


# --- failing tasks ----------------------------------------------------------------------------


def fail(task, message="CLI exited with code 1. Invalid API key\nPlease run /login", times=1):
    for _ in range(times):
        fail_task(task, message)
    task.refresh_from_db()
    return task


def card_of(page: str, task):
    from tests.htmltree import parse

    return parse(page).by_id(f"task-card-{task.id}")


def test_a_failing_card_shows_the_error_its_first_line_and_the_next_retry(client, workspace):
    task = fail(make_task(workspace, "Broken", status="in_progress"), times=3)
    fine = make_task(workspace, "Fine", status="in_progress")
    card = card_of(html(client.get(board_url(workspace))), task)
    error = card.find("task-card__error")
    assert error.find("badge").text == "Failed 3 times"
    assert error.find("task-card__error-text").text == "CLI exited with code 1. Invalid API key"
    retry = error.find("task-card__retry")
    assert retry.text.startswith("Next retry at ")
    assert retry.find(tag="time").attrs["datetime"] == task.retry_not_before.isoformat()
    assert card_of(html(client.get(board_url(workspace))), fine).find("task-card__error") is None


def test_a_failing_cards_retry_line_follows_the_queue(client, workspace):
    task = fail(make_task(workspace, "Broken", status="in_progress"))

    def retry_text():
        page = html(hx(client, "get", f"/workspaces/{workspace.id}/tasks/column/{task.status}/"))
        return card_of(page, task).find("task-card__retry").text

    Task.objects.filter(id=task.id).update(retry_not_before=timezone.now() - timedelta(seconds=1))
    assert retry_text() == "Retry pending"  # due: waiting for the worker
    services.task_retries_stop(task=task)
    task.refresh_from_db()
    assert retry_text() == "Not retrying"
    services.task_retry_now(task=task)
    TaskQueueItem.objects.filter(task=task).update(status="in_progress")
    assert retry_text() == "Retrying now"
    # Success ends the error state; so does a status where nothing retries.
    services.task_run_succeeded(task=task)
    page = html(hx(client, "get", f"/workspaces/{workspace.id}/tasks/column/{task.status}/"))
    assert card_of(page, task).find("task-card__error") is None
    review = fail(make_task(workspace, "Waiting", status="in_review"))
    page = html(client.get(board_url(workspace)))
    assert card_of(page, review).find("task-card__error") is None


def test_a_failing_task_whose_cli_ran_out_of_quota_waits_for_it_not_for_a_retry(client, workspace):
    """Its retry waits for the CLI's reset: no "Next retry at", no "Retry now" (it would only
    wait again); "Stop retrying" still moves it to Todo."""
    from tests.htmltree import parse

    task = fail(make_task(workspace, "Broken", status="in_progress"), times=2)
    TaskQueueItem.objects.queued().filter(task=task).update(waiting_for_cli="codex")
    card = card_of(html(client.get(board_url(workspace))), task)
    assert card.find("task-card__retry").text == "Paused: Codex CLI is out of quota"
    banner = parse(html(hx(client, "get", f"/tasks/{task.id}/"))).by_id("task-error")
    assert banner.find("task-error__retry").text == "Paused: Codex CLI is out of quota"
    assert [b.text for b in banner.find_all(tag="button")] == ["Stop retrying"]
    TaskQueueItem.objects.filter(task=task).update(waiting_for_cli="")  # the reset came
    banner = parse(html(hx(client, "get", f"/tasks/{task.id}/"))).by_id("task-error")
    assert banner.find("task-error__retry").text.startswith("Next retry at ")
    assert [b.text for b in banner.find_all(tag="button")] == ["Retry now", "Stop retrying"]


def test_failing_cards_cost_no_extra_queries(client, workspace):
    for n in range(3):
        make_task(workspace, f"Fine {n}", status="in_progress")
    before = board_queries(client, workspace)
    for task in Task.objects.all():
        fail(task, times=2)
    assert board_queries(client, workspace) == before


def test_popup_shows_the_error_state_and_collapses_repeated_errors(client, workspace):
    from tests.htmltree import parse

    task = make_task(workspace, "Broken", status="in_progress")
    services.comment_create(task=task, content="Do it", actor=USER)
    fail(task, "CLI exited with code 1. 401", times=5)
    fail(task, "CLI could not be started: no binary")
    fail(task, "CLI exited with code 1. 401", times=2)
    services.comment_create(task=task, content="CLI exited with code 1. 401", actor=SYSTEM)
    page = parse(html(hx(client, "get", f"/tasks/{task.id}/")))
    banner = page.by_id("task-error")
    assert banner.find("banner__title").text == "The last 8 runs failed"
    assert banner.find("task-error__text").text == "CLI exited with code 1. 401"
    assert banner.find("task-error__retry").text.startswith("Next retry at ")
    assert [b.text for b in banner.find_all(tag="button")] == ["Retry now", "Stop retrying"]
    comments = page.by_id("task-comments").find_all("comment", tag="li")
    shown = [(c.find("comment__body").text, c.find("comment__repeat")) for c in comments]
    assert [text for text, _ in shown] == [
        "Do it",
        "CLI exited with code 1. 401",
        "CLI could not be started: no binary",
        "CLI exited with code 1. 401",
        "CLI exited with code 1. 401",  # a plain system comment: not an error, not folded
    ]
    repeats = [repeat.text if repeat else None for _, repeat in shown]
    assert repeats[0] is None and repeats[2] is None and repeats[4] is None
    assert repeats[1].startswith("5 times, last at ") and repeats[3].startswith("2 times, last")
    assert ["comment--error" in c.classes for c in comments] == [False, True, True, True, False]


def test_retry_now_and_stop_retrying_from_the_popup(client, workspace):
    task = fail(make_task(workspace, "Broken", status="in_progress"))
    response = hx(client, "post", f"/tasks/{task.id}/retry/")
    task.refresh_from_db()
    assert task.retry_not_before is None
    assert triggers(response)["malamar:toast"]["message"] == "Retrying now"
    assert response.headers["HX-Retarget"] == "#task-head"
    response = hx(client, "post", f"/tasks/{task.id}/stop-retrying/")
    task.refresh_from_db()
    retries = TaskQueueItem.objects.filter(task=task).exclude(status="failed")
    assert task.status == "todo" and not retries.exists()
    from tests.htmltree import parse

    banner = parse(html(response)).by_id("task-error")
    assert banner.find("task-error__retry").text == "Not retrying"
    log = parse(html(hx(client, "get", f"/tasks/{task.id}/", target="task-log")))
    texts = [entry.find("task-log__text").text for entry in log.find_all("task-log__entry")]
    assert texts[-3:] == [
        "User retried the failing task now",
        "User moved to Todo",
        "User stopped the retries",
    ]
    assert [b.text for b in banner.find_all(tag="button")] == ["Retry now"]
    # Not failing (any more): an error toast, nothing changes.
    services.task_run_succeeded(task=task)
    response = hx(client, "post", f"/tasks/{task.id}/stop-retrying/")
    assert triggers(response)["malamar:toast"]["level"] == "error"
    assert parse(html(response)).by_id("task-error") is None


@pytest.mark.parametrize(
    "mode, path, kept",
    [
        ("temp", None, "stays in the task's temporary folder, where the next run carries on"),
        ("static", "/srv/shop", "What it already changed in /srv/shop stays there"),
    ],
)
def test_cancel_confirmation_says_what_happens_to_the_work(client, workspace, mode, path, kept):
    workspace.working_directory_mode, workspace.working_directory_path = mode, path
    workspace.save()
    task = make_task(workspace, "Stop me", status="in_progress")
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    [button] = elements(page, "button", id="task-cancel")
    assert button["data-confirm"] == "Cancel this task?"
    assert kept in button["data-confirm-text"]
    assert "discard" not in button["data-confirm-text"]
    # Its two answers do not both say "Cancel".
    assert (button["data-confirm-action"], button["data-confirm-dismiss"]) == (
        "Cancel task",
        "Keep running",
    )
