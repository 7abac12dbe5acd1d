"""Issue 29's other surfaces: the review through the MCP server and the Malamar agent, the
task popup's minimal review controls, the "Needs you" reads (a constant number of queries),
paused imports, the description save that another tab beat, the working directory that must
exist, and the migrations that keep existing users' data right."""

import os
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.services import agent_create
from chats import services as chat_services
from chats.actions import execute_actions
from chats.models import ChatMessage
from core.actors import SYSTEM
from malamar_site.needs_you import needs_you, needs_you_count
from runner.schemas import chat_schema
from tasks import services
from tasks.mcp_server import LineComment, WorkspaceTools
from tasks.models import Task, TaskComment, TaskQueueItem, TaskStatus
from tests.conftest import error_of
from tests.failures import fail_task
from tests.gitrepo import make_repo
from tests.htmltree import parse
from tests.migration_history import originals_executor
from tests.pages import html, hx, triggers
from tests.stack import FAKES_BIN
from worker import prompts
from worker.pipeline import TaskPass
from workspaces.models import Workspace
from workspaces.services import workspace_create

pass_db = pytest.mark.django_db(transaction=True)


def force_status(task, status):
    Task.objects.filter(id=task.id).update(status=status)
    task.status = status


@pytest.fixture
def fake_clis(tmp_path, settings, monkeypatch):
    settings.DATA_DIR = tmp_path / "malamar-data"
    settings.DATA_DIR.mkdir()
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")


def reviewed_branch_task(tmp_path, **fields) -> Task:
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    workspace = workspace_create(
        title="Repo",
        working_directory_mode="static",
        working_directory_path=str(repo),
        isolation="branch",
        **fields,
    )
    agent_create(workspace=workspace, name="Implementer", instruction="@fake write f.txt x")
    task = services.task_create(workspace=workspace, summary="Feature")
    item = TaskQueueItem.objects.queued().get(task_id=task.id)
    assert TaskQueueItem.objects.claim(item.id)
    TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()
    task = Task.objects.select_related("workspace").get(id=task.id)
    assert task.status == TaskStatus.IN_REVIEW and task.branch_name
    return task


# --- MCP and the Malamar agent ----------------------------------------------------------------


def test_the_mcp_server_leaves_a_review_as_agent_via_mcp(workspace):
    task = services.task_create(workspace=workspace, summary="Docs")
    force_status(task, TaskStatus.IN_REVIEW)
    tools = WorkspaceTools(workspace.id)
    answer = tools.review_task(task.id, "request_changes", body="Add an example.")
    assert (answer["status"], answer["verdict"]) == ("todo", "request_changes")
    comment = TaskComment.objects.get(id=answer["comment_ids"][0])
    assert (comment.kind, comment.agent_id, comment.verdict) == ("agent", "mcp", "request_changes")
    assert TaskQueueItem.objects.queued().filter(task_id=task.id).exists()
    # A refusal is a tool error with the service's message.
    from mcp.server.mcpserver.exceptions import ToolError

    with pytest.raises(ToolError, match="Only an In Review task can be reviewed"):
        tools.review_task(task.id, "approve")
    with pytest.raises(ToolError, match="There are no changes to comment on"):
        force_status(task, TaskStatus.IN_REVIEW)
        tools.review_task(
            task.id, "comment", line_comments=[LineComment(path="a.py", line=1, body="?")]
        )
    other = workspace_create(title="Other")
    foreign = services.task_create(workspace=other, summary="Not yours")
    with pytest.raises(ToolError, match="belongs to another workspace"):
        tools.review_task(foreign.id, "approve")


def test_the_malamar_agent_reviews_tasks_of_its_workspace_only(workspace):
    chat = chat_services.chat_create(workspace=workspace)
    task = services.task_create(workspace=workspace, summary="Docs")
    force_status(task, TaskStatus.IN_REVIEW)
    foreign = services.task_create(workspace=workspace_create(title="Other"), summary="No")
    force_status(foreign, TaskStatus.IN_REVIEW)
    # The strict schema sends every key (nulls for what does not apply).
    nulls = dict.fromkeys(chat_schema(malamar=True)["properties"]["actions"]["items"]["required"])
    results = execute_actions(
        chat=chat,
        actions=[
            {**nulls, "type": "review_task", "task_id": task.id, "verdict": "approve"},
            {**nulls, "type": "review_task", "task_id": foreign.id, "verdict": "approve"},
            {**nulls, "type": "review_task", "task_id": task.id, "verdict": "approve"},
        ],
        is_malamar=True,
    )
    assert [r.error for r in results] == [
        None,
        f"Task {foreign.id} not found in this workspace",
        "Only an In Review task can be reviewed (this one is Done): wait for the agents, or "
        "comment instead",
    ]
    assert Task.objects.get(id=task.id).status == TaskStatus.DONE
    assert Task.objects.get(id=foreign.id).status == TaskStatus.IN_REVIEW
    only_agents = execute_actions(
        chat=chat, actions=[{"type": "review_task", "task_id": task.id}], is_malamar=False
    )
    assert only_agents[0].error == "only the Malamar agent can do this"


def test_the_malamar_agent_sees_the_tasks_waiting_for_review(workspace):
    waiting = services.task_create(workspace=workspace, summary="Check the docs")
    force_status(waiting, TaskStatus.IN_REVIEW)
    Task.objects.filter(id=waiting.id).update(branch_name="malamar/x-docs", branch_base="main")
    services.task_create(workspace=workspace, summary="Still todo")
    from tasks.selectors import in_review_of_workspace

    text = prompts.chat_context(
        workspace=workspace,
        agents=[],
        clis=[],
        mailgun_configured=False,
        temp_dir="/tmp",
        review_tasks=in_review_of_workspace(workspace.id),
    )
    assert "# Tasks waiting for review (In Review, oldest first)" in text
    assert f"- {waiting.id}: Check the docs (branch malamar/x-docs, not merged into main yet)" in (
        text
    )
    assert "Still todo" not in text
    schema = chat_schema(malamar=True)["properties"]["actions"]["items"]["properties"]
    assert "review_task" in schema["type"]["enum"]
    line = schema["line_comments"]["items"]
    assert line["required"] == ["path", "line", "end_line", "side", "body", "run_id"]


# --- the task popup (what the existing page needs until the review UI) ------------------------


@pass_db
def test_the_popup_finishes_without_merging_and_shows_the_merge_afterwards(
    client, tmp_path, fake_clis
):
    task = reviewed_branch_task(tmp_path)
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    # "Move to Done" asks: merge into main and finish, or finish without merging.
    done = parse(page).by_id("task-move-done")
    assert done.attrs["popovertarget"] == "task-done-choice" and "hx-post" not in done.attrs
    choice = parse(page).by_id("task-done-choice")
    assert "Merge into main and finish" in choice.text
    assert "Finish without merging (keep the branch)" in choice.text
    assert 'id="task-merge"' in page  # "Merge into main" merges and finishes
    refused = hx(client, "post", f"/tasks/{task.id}/status/", {"status": "done"})
    assert triggers(refused)["malamar:toast"]["level"] == "error"
    assert (
        "choose to merge it into main and finish" in triggers(refused)["malamar:toast"]["message"]
    )
    response = hx(client, "post", f"/tasks/{task.id}/status/", {"status": "done", "merge": "0"})
    assert triggers(response)["malamar:toast"]["message"] == "Finished without merging"
    page = html(response)
    assert 'id="task-branch-unmerged"' in page and 'id="task-merge"' in page
    response = hx(client, "post", f"/tasks/{task.id}/merge/")
    page = html(response)
    assert "Merged into main" in page and 'id="task-merge"' not in page
    assert 'id="task-discard"' not in page


def test_the_popup_resumes_a_paused_task(client, workspace):
    task = services.task_create(workspace=workspace, summary="Imported")
    TaskQueueItem.objects.filter(task=task).delete()  # as an import leaves it
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-head"))
    assert 'id="task-resume"' in page
    response = hx(client, "post", f"/tasks/{task.id}/resume/")
    assert triggers(response)["malamar:toast"]["message"] == "Resumed"
    assert 'id="task-resume"' not in html(response)
    assert TaskQueueItem.objects.queued().filter(task=task).exists()


def test_the_api_resumes_paused_tasks(api, workspace):
    tasks = [services.task_create(workspace=workspace, summary=f"T{i}") for i in range(3)]
    TaskQueueItem.objects.filter(task__in=tasks[:2]).delete()
    listed = api.get(f"/api/workspaces/{workspace.id}/tasks").json()["tasks"]
    assert sorted(t["is_paused"] for t in listed) == [False, True, True]
    response = api.post(f"/api/tasks/{tasks[0].id}/resume")
    assert response.status_code == 200 and response.json()["is_paused"] is False
    again = api.post(f"/api/tasks/{tasks[0].id}/resume")
    assert again.status_code == 409 and "paused" in error_of(again)["message"]
    assert api.post(f"/api/workspaces/{workspace.id}/tasks/resume").json() == {"resumed": 1}
    assert not Task.objects.paused().exists()
    assert [log.actor_type for log in tasks[1].logs.filter(event_type="task_resumed")] == ["user"]


# --- a description save that another tab beat -------------------------------------------------


def test_a_description_save_over_a_newer_one_is_refused_with_both_texts(api, task):
    url = f"/api/tasks/{task.id}"
    assert task.description == "With tests"  # both tabs opened the editor on this text
    ok = api.put(url, {"description": "From tab A", "description_base": "With tests"})
    assert ok.status_code == 200
    stale = api.put(url, {"description": "From tab B", "description_base": "With tests"})
    assert stale.status_code == 409
    error = error_of(stale)
    assert error["code"] == "DESCRIPTION_CHANGED"
    assert (error["current_description"], error["your_description"]) == (
        "From tab A",
        "From tab B",
    )
    assert api.get(url).json()["description"] == "From tab A"
    # Knowing the current text, the save goes through; without a base it saves as before.
    merged = api.put(url, {"description": "A and B", "description_base": "From tab A"})
    assert merged.status_code == 200 and merged.json()["description"] == "A and B"
    assert api.put(url, {"description": "plain"}).json()["description"] == "plain"


def test_the_popup_keeps_both_descriptions_when_another_tab_saved_first(client, task):
    url = f"/tasks/{task.id}/description/edit/"
    form = html(hx(client, "get", url))
    assert 'name="description_base"' in form
    services.task_update(task=task, description="Saved in the other tab")
    page = html(hx(client, "post", url, {"description": "Mine", "description_base": "With tests"}))
    assert 'id="task-description-conflict"' in page
    assert "Saved in the other tab</pre>" in page and "\nMine</textarea>" in page
    assert 'name="description_base" value="Saved in the other tab"' in page
    assert Task.objects.get(id=task.id).description == "Saved in the other tab"
    hx(client, "post", url, {"description": "Mine", "description_base": "Saved in the other tab"})
    assert Task.objects.get(id=task.id).description == "Mine"


# --- the working directory --------------------------------------------------------------------


def test_a_working_directory_that_does_not_exist_is_refused(api, tmp_path):
    made = api.post(
        "/api/workspaces",
        {"title": "A", "working_directory_mode": "static", "working_directory_path": "/no/such"},
    )
    assert made.status_code == 400
    assert "/no/such does not exist: create it first" in error_of(made)["message"]
    (tmp_path / "file").write_text("x")
    ws = api.post("/api/workspaces", {"title": "B"}).json()
    bad = api.put(
        f"/api/workspaces/{ws['id']}",
        {"working_directory_mode": "static", "working_directory_path": str(tmp_path / "file")},
    )
    assert bad.status_code == 400 and "is not a folder" in error_of(bad)["message"]
    good = api.put(
        f"/api/workspaces/{ws['id']}",
        {"working_directory_mode": "static", "working_directory_path": str(tmp_path)},
    )
    assert good.status_code == 200
    (tmp_path / "gone").mkdir()
    Workspace.objects.filter(id=ws["id"]).update(working_directory_path=str(tmp_path / "gone"))
    (tmp_path / "gone").rmdir()
    # Other settings still save while the folder is away (only the folder itself is checked).
    assert api.put(f"/api/workspaces/{ws['id']}", {"title": "C"}).status_code == 200


# --- "Needs you" ------------------------------------------------------------------------------


def needs_you_rows(first: int, last: int):
    """Per workspace: a task In Review, a failing one, one waiting for a CLI, a chat with a
    reply the person has not seen and one they saw."""
    for n in range(first, last):
        ws = workspace_create(title=f"W{n}")
        review = services.task_create(workspace=ws, summary=f"review {n}")
        services.task_status_set(task=review, status=TaskStatus.IN_PROGRESS, actor=SYSTEM)
        services.task_status_set(task=review, status=TaskStatus.IN_REVIEW, actor=SYSTEM)
        failing = services.task_create(workspace=ws, summary=f"failing {n}")
        fail_task(failing, "exit 1")
        waiting = services.task_create(workspace=ws, summary=f"waiting {n}")
        TaskQueueItem.objects.filter(task=waiting).update(waiting_for_cli="codex")
        services.task_create(workspace=ws, summary=f"quiet {n}")
        for seen in (False, True):
            chat = chat_services.chat_create(workspace=ws, title=f"chat {n} {seen}")
            ChatMessage.objects.create(
                chat=chat, role="agent", message="Done: 2 agents", agent_name="Malamar"
            )
            if seen:
                chat_services.chat_seen(chat=chat)


def api_queries(api) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert api.get("/api/needs-you").status_code == 200
    return len(queries)


def test_needs_you_lists_what_waits_in_a_constant_number_of_queries(api, django_assert_num_queries):
    # Three lists, three counts, and the reasons of the CLIs that cannot run (tasks wait).
    needs_you_rows(0, 2)
    with django_assert_num_queries(7):
        small = needs_you()
    small_api = api_queries(api)
    needs_you_rows(2, 7)
    with django_assert_num_queries(7):
        found = needs_you()
    assert api_queries(api) == small_api  # the rows' workspaces and blockers come along
    assert (small.count, found.count) == (8, 28)
    assert len(found.review) == found.review_count == 7
    assert all(t.status == TaskStatus.IN_REVIEW and t.workspace.title for t in found.review)
    assert {t.summary.split()[0] for t in found.trouble} == {"failing", "waiting"}
    waits = {t.summary: (t.waiting_label, bool(t.error_state)) for t in found.trouble}
    assert waits["waiting 0"] == ("Codex CLI", False) and waits["failing 0"] == ("", True)
    assert {c.title for c in found.chats} == {f"chat {n} False" for n in range(7)}
    assert found.chats[0].last_reply_preview == "Done: 2 agents"
    with django_assert_num_queries(3):
        assert needs_you_count() == 28


def test_in_review_is_oldest_first_by_when_it_got_there(db):
    ws = workspace_create(title="W")
    first = services.task_create(workspace=ws, summary="first to review")
    second = services.task_create(workspace=ws, summary="second")
    for task in (first, second):
        services.task_status_set(task=task, status=TaskStatus.IN_PROGRESS, actor=SYSTEM)
    services.task_status_set(task=first, status=TaskStatus.IN_REVIEW, actor=SYSTEM)
    services.task_status_set(task=second, status=TaskStatus.IN_REVIEW, actor=SYSTEM)
    services.task_update(task=first, summary="first to review, edited later")  # newer update
    found = needs_you()
    assert [t.id for t in found.review] == [first.id, second.id]
    assert found.review[0].in_review_since <= found.review[1].in_review_since


def test_the_api_lists_what_needs_you_and_a_look_clears_a_chat(api, client, workspace):
    chat = chat_services.chat_create(workspace=workspace, title="Setup")
    ChatMessage.objects.create(chat=chat, role="agent", message="Hi", agent_name="Malamar")
    task = services.task_create(workspace=workspace, summary="Look at me")
    force_status(task, TaskStatus.IN_REVIEW)
    body = api.get("/api/needs-you").json()
    assert (body["count"], body["review_count"], body["chat_count"]) == (2, 1, 1)
    assert body["review"][0]["workspace_title"] == "Project X"
    assert body["chats"][0]["last_reply_agent"] == "Malamar"
    assert api.post(f"/api/chats/{chat.id}/seen").status_code == 200
    assert api.get("/api/needs-you").json()["chat_count"] == 0
    ChatMessage.objects.create(chat=chat, role="agent", message="More", agent_name="Malamar")
    assert api.get("/api/needs-you").json()["chat_count"] == 1
    hx(client, "get", f"/chats/{chat.id}/")  # opening the chat is looking at it
    assert api.get("/api/needs-you").json()["chat_count"] == 0


# --- migrations -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_migrations_keep_chosen_retention_and_record_earlier_merges():
    before = [("workspaces", "0006_mcp_tools_enabled"), ("tasks", "0007_workers")]
    executor = originals_executor(connection)
    executor.migrate(before)
    old = originals_executor(connection).loader.project_state(before).apps
    Old = old.get_model("workspaces", "Workspace")
    untouched = Old.objects.create(title="defaults", auto_delete_done_tasks=True, retention_days=7)
    Old.objects.create(title="chosen", auto_delete_done_tasks=True, retention_days=30)
    Old.objects.create(title="off", auto_delete_done_tasks=False, retention_days=7)
    OldTask = old.get_model("tasks", "Task")
    merged = OldTask.objects.create(
        workspace_id=untouched.id, summary="m", status="done", branch_name="malamar/m"
    )
    kept = OldTask.objects.create(
        workspace_id=untouched.id, summary="k", status="done", branch_name="malamar/k"
    )
    when = timezone.now() - timezone.timedelta(days=2)
    old.get_model("tasks", "TaskLog").objects.create(
        task_id=merged.id,
        workspace_id=untouched.id,
        event_type="branch_merged",
        actor_type="user",
        created_at=when,
    )
    latest = originals_executor(connection)
    latest.migrate(latest.loader.graph.leaf_nodes())
    auto = dict(Workspace.objects.values_list("title", "auto_delete_done_tasks"))
    assert auto == {"defaults": False, "chosen": True, "off": False}
    assert Task.objects.get(id=merged.id).merged_at == when
    assert Task.objects.get(id=kept.id).merged_at is None
    assert Task.objects.get(id=kept.id).is_unmerged


# --- the OpenAPI docs -------------------------------------------------------------------------


def test_the_openapi_document_describes_the_review_and_needs_you(api):
    document = api.get("/api/openapi.json").json()
    review = document["paths"]["/api/tasks/{task_id}/review"]["post"]
    assert "MERGE_CHOICE_REQUIRED" in review["description"]
    schemas = document["components"]["schemas"]
    verdict = schemas["ReviewIn"]["properties"]["verdict"]
    assert verdict["enum"] == ["approve", "request_changes", "comment"]
    assert "finishes without merging" in schemas["ReviewIn"]["properties"]["merge"]["description"]
    assert set(schemas["LineCommentIn"]["properties"]) == {
        "path",
        "line",
        "end_line",
        "side",
        "body",
        "run_id",
    }
    assert "merge" in schemas["TaskUpdate"]["properties"]
    assert "description_base" in schemas["TaskUpdate"]["properties"]
    for path in (
        "/api/needs-you",
        "/api/tasks/{task_id}/resume",
        "/api/workspaces/{workspace_id}/tasks/resume",
        "/api/chats/{chat_id}/seen",
    ):
        assert path in document["paths"], path
    deletes = document["paths"]["/api/tasks/{task_id}"]["delete"]
    assert [p["name"] for p in deletes["parameters"] if p["in"] == "query"] == ["confirm"]


def test_the_mcp_get_task_says_where_a_line_comment_is(workspace):
    task = services.task_create(workspace=workspace, summary="Docs")
    TaskComment.objects.create(
        task=task,
        workspace=workspace,
        user_id="0" * 21,
        kind="user",
        verdict="request_changes",
        content="Name it better.",
        anchor_path="docs/a.md",
        anchor_side="new",
        anchor_start_line=3,
        anchor_end_line=4,
        anchor_code="# Titel\nText",
    )
    [row] = WorkspaceTools(workspace.id).get_task(task.id)["comments"]
    assert row["verdict"] == "request_changes"
    assert row["line"] == {
        "path": "docs/a.md",
        "line": 3,
        "end_line": 4,
        "side": "new",
        "code": "# Titel\nText",
    }
