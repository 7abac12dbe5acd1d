"""The board's search and filters (server-side, a constant number of queries) and its card
moves (drag and drop or the move dialog): the moves the person may make, a refusal that says
why, and Done of an unmerged branch task that asks to merge or keep it (issue 29)."""

from urllib.parse import parse_qs, urlsplit

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.services import agent_create
from core.actors import SYSTEM, USER
from runner.models import AgentRun
from tasks import selectors, services
from tasks.models import Task, TaskQueueItem, TaskStatus
from tasks.moves import USER_MOVES, user_refusal
from tests.htmltree import parse
from tests.pages import html, hx, triggers
from tests.test_pages_tasks import make_task, start_run
from tests.test_review_surfaces import fake_clis, reviewed_branch_task  # noqa: F401 (fixture)
from workspaces.services import workspace_create

pytestmark = pytest.mark.django_db


def refused(response) -> str:
    """The error toast of an answer that changes nothing on the page ("" if it is not one)."""
    toast = triggers(response).get("malamar:toast", {})
    swapped = response.headers.get("HX-Reswap") != "none"
    if response.status_code != 200 or swapped or toast.get("level") != "error":
        return ""
    return toast["message"]


def board(client, workspace, **params):
    return hx(client, "get", f"/workspaces/{workspace.id}/tasks/", params, target="task-board")


def shown(response) -> list[str]:
    """The summaries on the board, column by column."""
    return [el.text for el in parse(html(response)).find_all("task-card__summary") if el.text]


def ran(task, agent, files_changed=None) -> None:
    AgentRun.objects.create(
        id=f"r{task.id[:12]}{agent.id[:6]}",
        workspace_id=task.workspace_id,
        task=task,
        agent_id=agent.id,
        agent_name=agent.name,
        cli_type="claude",
        started_at=task.created_at,
        status="succeeded",
        task_files_changed=files_changed,
    )


@pytest.fixture
def shop(db):
    """A board with one task of each kind the filters tell apart."""
    workspace = workspace_create(title="Shop")
    planner = agent_create(workspace=workspace, name="Planner", instruction="Plan.")
    coder = agent_create(workspace=workspace, name="Coder", instruction="Code.")
    tasks = {
        "login": make_task(workspace, "Login page", description="Use OAuth with PKCE"),
        "cart": make_task(workspace, "Cart", status="in_review"),
        "failing": make_task(workspace, "Payments", status="in_progress", failure_streak=2),
        "quiet": make_task(workspace, "Footer", status="done"),
    }
    services.comment_create(task=tasks["cart"], content="The coupon box overflows", actor=USER)
    tasks["waiting"] = services.task_create(
        workspace=workspace, summary="Checkout", blocked_by=[tasks["cart"].id]
    )
    tasks["quota"] = make_task(workspace, "Images")
    TaskQueueItem.objects.filter(task=tasks["quota"]).update(waiting_for_cli="gemini")
    ran(tasks["cart"], coder, files_changed=3)
    ran(tasks["login"], planner, files_changed=0)
    ran(tasks["quiet"], coder)
    return workspace, tasks, {"planner": planner, "coder": coder}


def test_search_reads_summaries_descriptions_and_comments(client, shop):
    workspace, _tasks, _agents = shop
    assert shown(board(client, workspace, q="oauth")) == ["Login page"]  # description
    assert shown(board(client, workspace, q="COUPON")) == ["Cart"]  # a comment, any case
    assert shown(board(client, workspace, q="pay")) == ["Payments"]  # summary
    nothing = parse(html(board(client, workspace, q="kubernetes")))
    assert "No task matches" in nothing.by_id("tasks-no-match").text
    assert parse(html(board(client, workspace))).by_id("tasks-no-match") is None


def test_filters_keep_what_is_ticked_and_the_columns_count_it(client, shop):
    workspace, _tasks, agents = shop
    assert shown(board(client, workspace, agent=agents["coder"].id)) == ["Cart", "Footer"]
    assert shown(board(client, workspace, failing="1")) == ["Payments"]
    assert shown(board(client, workspace, changes="1")) == ["Cart"]  # 0 files is no change
    assert sorted(shown(board(client, workspace, waiting="1"))) == ["Checkout", "Images"]
    both = board(client, workspace, agent=agents["coder"].id, changes="1", q="cart")
    assert shown(both) == ["Cart"]
    column = parse(html(board(client, workspace, waiting="1"))).by_id("col-todo")
    assert column.find("kanban-col__count").text == "2"
    # "Show all" of a column keeps the filters (its request includes the filter form).
    column = html(
        hx(client, "get", f"/workspaces/{workspace.id}/tasks/column/todo/", {"waiting": "1"})
    )
    assert sorted(el.text for el in parse(column).find_all("task-card__summary")) == [
        "Checkout",
        "Images",
    ]


def test_the_board_page_keeps_its_filters_in_the_address(client, shop):
    workspace, _tasks, _agents = shop
    page = parse(html(client.get(f"/workspaces/{workspace.id}/", {"tab": "tasks", "q": "oauth"})))
    assert [el.text for el in page.find_all("task-card__summary") if el.text] == ["Login page"]
    assert page.by_id("board-search").attrs["value"] == "oauth"
    assert page.by_id("task-board").attrs["hx-include"] == "#task-board [name=all], #board-filters"
    agent_options = page.by_id("board-agent").find_all(tag="option")
    assert [o.text for o in agent_options] == ["Any agent", "Planner", "Coder"]
    # A search from the form puts itself in the address; a live refresh leaves it alone.
    response = hx(
        client,
        "get",
        f"/workspaces/{workspace.id}/tasks/",
        {"q": "cart", "changes": "1"},
        HTTP_HX_TRIGGER="board-search",
    )
    address = urlsplit(response["HX-Replace-Url"])
    assert address.path == f"/workspaces/{workspace.id}/"
    assert parse_qs(address.query) == {"tab": ["tasks"], "q": ["cart"], "changes": ["1"]}
    refresh = hx(client, "get", f"/workspaces/{workspace.id}/tasks/", {"q": "cart"})
    assert "HX-Replace-Url" not in refresh
    # Without htmx the board's address sends to the page with the same filters.
    plain = client.get(f"/workspaces/{workspace.id}/tasks/", {"failing": "1", "agent": ""})
    assert plain["Location"] == f"/workspaces/{workspace.id}/?tab=tasks&failing=1"


def test_a_search_too_long_is_refused_with_a_message(client, shop):
    workspace, _tasks, _agents = shop
    response = board(client, workspace, q="x" * 1001)
    assert refused(response)
    assert "Search:" in triggers(response)["malamar:toast"]["message"]
    page = client.get(f"/workspaces/{workspace.id}/", {"tab": "tasks", "q": "x" * 1001})
    assert page.status_code == 200  # the whole board, and the reason in a message
    assert "at most 1000 characters" in parse(html(page)).by_id("flash-messages").text


FILTER_SETS = (
    {"q": "task", "agent": "AGENT", "changes": "1"},  # every column keeps some cards
    {"failing": "1"},  # In Progress only
    {"waiting": "1"},  # Todo only
)


def filtered_board_queries(client, workspace, agent_id, params) -> int:
    params = {name: agent_id if value == "AGENT" else value for name, value in params.items()}
    with CaptureQueriesContext(connection) as queries:
        response = board(client, workspace, **params)
    assert response.status_code == 200 and shown(response)
    return len(queries)


def populate(workspace, count: int, agent) -> None:
    statuses = ["todo", "in_progress", "in_review", "done"]
    for n in range(count):
        task = make_task(workspace, f"Task {n}", status=statuses[n % 4], failure_streak=n % 2)
        services.comment_create(task=task, content="note", actor=SYSTEM)
        ran(task, agent, files_changed=n % 3)
        if task.status == "in_progress":
            start_run(task)
        if n % 8 == 2:  # (its first: a waiting task costs one query more, on both boards)
            TaskQueueItem.objects.filter(task=task).update(waiting_for_cli="codex")


def test_a_filtered_board_costs_the_same_queries_for_8_or_200_tasks(client):
    small, large = workspace_create(title="Small"), workspace_create(title="Large")
    small_agent = agent_create(workspace=small, name="A", instruction="a")
    large_agent = agent_create(workspace=large, name="A", instruction="a")
    populate(small, 8, small_agent)
    populate(large, 200, large_agent)
    for params in FILTER_SETS:
        few = filtered_board_queries(client, small, small_agent.id, params)
        assert few == filtered_board_queries(client, large, large_agent.id, params), params
    # Search and filters are subqueries of the board's own queries: none is added.
    with CaptureQueriesContext(connection) as unfiltered:
        board(client, large)
    assert filtered_board_queries(client, large, large_agent.id, FILTER_SETS[0]) == len(unfiltered)
    filters = selectors.BoardFilters(query="task", agent=large_agent.id, changes=True)
    with CaptureQueriesContext(connection) as queries:
        found = selectors.board(large, filters=filters)
    # counts, the four columns' cards, their blockers, running runs, and (as a shown task waits
    # for a CLI) why that CLI cannot run
    assert len(queries) == 5
    in_progress = next(c for c in found["columns"] if c.status == "in_progress")
    assert in_progress.total == sum(1 for n in range(200) if n % 4 == 1 and n % 3) == 34


# --- moves ------------------------------------------------------------------------------------


def move(client, workspace, task, status, **extra):
    data = {"task": task.id, "status": status, **extra}
    return hx(client, "post", f"/workspaces/{workspace.id}/tasks/move/", data, target="board-move")


def test_columns_say_where_their_cards_may_go(client, shop):
    workspace, _tasks, _agents = shop
    page = parse(html(client.get(f"/workspaces/{workspace.id}/")))
    for status in TaskStatus.values:
        column = page.by_id(f"col-{status}")
        assert set(column.attrs["data-moves"].split()) == set(USER_MOVES[status])
    card = page.find("task-card-item")
    assert card.attrs["draggable"] == "true"
    grip = card.find("task-card__move")
    assert grip.attrs["hx-get"] == f"/tasks/{card.attrs['data-task-id']}/move/"
    assert grip.attrs["hx-target"] == "#task-move-body"
    assert page.by_id("task-move-body") is not None
    assert grip.attrs["aria-label"].startswith("Move “")
    form = page.by_id("board-move")
    assert form.attrs["hx-post"] == f"/workspaces/{workspace.id}/tasks/move/"
    assert form.attrs["hx-target"] == "#task-board"


def test_a_cards_move_dialog_offers_the_other_columns_the_allowed_one_first(client, shop):
    workspace, tasks, _agents = shop
    footer = tasks["quiet"]  # Done: it may go back to Todo only
    dialog = parse(html(hx(client, "get", f"/tasks/{footer.id}/move/", target="task-move-body")))
    [summary] = [el for el in dialog.iter() if "data-move-summary" in el.attrs]
    assert summary.text == "Footer"
    choices = dialog.find_all("move-choice", tag="button")
    assert [choice.attrs["value"] for choice in choices] == [
        status for status in TaskStatus.values if status != "done"
    ]
    refused_ones = [c.attrs["value"] for c in choices if "move-choice--refused" in c.classes]
    assert refused_ones == [s for s in TaskStatus.values if s not in ("done", *USER_MOVES["done"])]
    assert [c.attrs["value"] for c in choices if "data-autofocus" in c.attrs] == ["todo"]
    form = dialog.find(tag="form")
    assert form.attrs["hx-post"] == f"/workspaces/{workspace.id}/tasks/move/"
    assert form.attrs["hx-include"] == "#board-filters, #task-board [name=all]"
    assert form.find(tag="input", name="task").attrs["value"] == footer.id
    assert client.get(f"/tasks/{footer.id}/move/").status_code == 302  # (no JavaScript)


def test_a_card_moved_to_a_column_it_may_go_to_answers_the_filtered_board(client, shop):
    workspace, tasks, _agents = shop
    response = move(client, workspace, tasks["cart"], "todo", q="cart", all="todo")
    assert response.status_code == 200
    assert triggers(response)["malamar:toast"]["message"] == "Moved to Todo"
    assert Task.objects.get(id=tasks["cart"].id).status == TaskStatus.TODO
    assert shown(response) == ["Cart"]  # the board as the search shows it
    assert "data-show-all" in parse(html(response)).by_id("col-todo").attrs


def test_a_refused_move_says_why_and_changes_nothing(client, shop):
    workspace, tasks, _agents = shop
    response = move(client, workspace, tasks["login"], "in_progress")
    assert refused(response)
    message = triggers(response)["malamar:toast"]["message"]
    assert message == (
        "You cannot move a task from Todo to In Progress: the agents pick up Todo tasks "
        "themselves, in order (Prioritize puts one first); it reaches In Review when they are "
        "done"
    )
    assert Task.objects.get(id=tasks["login"].id).status == TaskStatus.TODO
    assert "malamar:dialog-close" in triggers(response)  # (the card's move dialog)
    assert (
        "agents are working on it"
        in triggers(move(client, workspace, tasks["failing"], "done"))["malamar:toast"]["message"]
    )
    other = services.task_create(workspace=workspace_create(title="Other"), summary="Elsewhere")
    assert "no longer exists" in refused(move(client, workspace, other, "done"))
    assert "status must be one of" in refused(move(client, workspace, tasks["cart"], "nowhere"))


def test_every_move_the_person_may_not_make_has_a_reason():
    for old in TaskStatus.values:
        for new in TaskStatus.values:
            allowed = new == old or new in USER_MOVES[old]
            assert bool(user_refusal(old, new)) != allowed, (old, new)


@pytest.mark.django_db(transaction=True)
def test_done_for_an_unmerged_branch_asks_to_merge_or_keep_it(client, tmp_path, fake_clis):  # noqa: F811
    task = reviewed_branch_task(tmp_path)
    workspace = task.workspace
    page = parse(html(client.get(f"/workspaces/{workspace.id}/")))
    assert page.by_id("merge-choice-body") is not None
    asked = move(client, workspace, task, "done")
    assert asked.headers["HX-Retarget"] == "#merge-choice-body"
    assert "malamar:dialog-close" in triggers(asked)  # (the card's move dialog, under it)
    dialog = parse(html(asked))
    keep = dialog.by_id("merge-choice-keep")
    assert keep.attrs["hx-post"] == f"/workspaces/{workspace.id}/tasks/move/"
    assert keep.attrs["hx-include"] == "#board-filters, #task-board [name=all]"
    assert (
        '"merge": "0"' in keep.attrs["hx-vals"] and f'"task": "{task.id}"' in keep.attrs["hx-vals"]
    )
    assert f"Merge into {task.branch_base} and finish" in dialog.by_id("merge-choice-merge").text
    assert Task.objects.get(id=task.id).status == TaskStatus.IN_REVIEW
    kept = move(client, workspace, task, "done", merge="0")
    assert triggers(kept)["malamar:toast"]["message"] == "Finished without merging"
    assert "malamar:dialog-close" in triggers(kept)
    task = Task.objects.get(id=task.id)
    assert task.status == TaskStatus.DONE and task.merged_at is None and task.branch_name
