"""Dependencies on the pages: the new-task dialog, the popup's "Waits for" form, the card chip."""

import pytest

from core.actors import SYSTEM, USER
from tasks import services
from tasks.models import TaskStatus
from tests.htmltree import parse
from tests.pages import elements, html, hx, triggers
from workspaces.services import workspace_create

pytestmark = pytest.mark.django_db


def board(client, workspace) -> str:
    return html(client.get(f"/workspaces/{workspace.id}/?tab=tasks"))


def waits_for_field(page: str):
    """The parsed new-task dialog's "waits for" field, or None."""
    return parse(page).find(tag="select", name="blocked_by")


def test_new_task_dialog_offers_tasks_to_wait_for(client, workspace):
    url = f"/workspaces/{workspace.id}/tasks/new/blockers/"  # loaded when the dialog opens
    assert 'name="blocked_by"' not in html(hx(client, "get", url))  # nothing to wait for yet
    plan = services.task_create(workspace=workspace, summary="Plan")
    assert 'name="blocked_by"' not in board(client, workspace)  # not on every board load
    dialog = html(hx(client, "get", url))
    options = elements(dialog, "option", value=plan.id)
    assert options and 'name="blocked_by"' in dialog
    response = hx(
        client,
        "post",
        f"/workspaces/{workspace.id}/tasks/new/",
        {"summary": "Build", "blocked_by": [plan.id]},
    )
    assert response.status_code == 200
    build = workspace.tasks.get(summary="Build")
    assert list(build.blocker_links.values_list("blocker_id", flat=True)) == [plan.id]


def test_waiting_card_shows_a_chip_linking_its_blockers(client, workspace):
    plan = services.task_create(workspace=workspace, summary="Plan")
    build = services.task_create(workspace=workspace, summary="Build", blocked_by=[plan.id])
    page = board(client, workspace)
    [item] = elements(page, "li", id=f"task-card-{build.id}")
    assert item["data-blocked-by"] == plan.id
    [chip] = elements(page, "p", **{"data-task-waiting": build.id})
    assert chip is not None
    [link] = elements(page, "a", **{"class": "task-card__blocker"})
    assert link["data-task-open"] == plan.id and f"task={plan.id}" in link["href"]
    services.task_status_set(task=plan, status=TaskStatus.IN_REVIEW, actor=SYSTEM)
    services.task_status_set(task=plan, status=TaskStatus.DONE, actor=USER)
    assert not elements(board(client, workspace), "p", **{"data-task-waiting": build.id})


def test_popup_sets_blockers_and_refuses_a_cycle_with_a_toast(client, workspace):
    plan = services.task_create(workspace=workspace, summary="Plan")
    build = services.task_create(workspace=workspace, summary="Build")
    response = hx(client, "post", f"/tasks/{build.id}/blockers/", {"blocked_by": [plan.id]})
    assert response.status_code == 200
    blockers = parse(html(response)).by_id("task-blockers")
    assert blockers.find("task-deps__label").text == "Waiting for"
    assert [link.attrs["data-task-open"] for link in blockers.find_all(tag="a")] == [plan.id]
    assert triggers(response)["malamar:toast"]["message"] == "Saved what the task waits for"
    dependents = parse(html(hx(client, "get", f"/tasks/{plan.id}/"))).by_id("task-dependents")
    assert [name.text for name in dependents.find_all("task-deps__summary")] == ["Build"]
    response = hx(client, "post", f"/tasks/{plan.id}/blockers/", {"blocked_by": [build.id]})
    toast = triggers(response)["malamar:toast"]
    assert toast["level"] == "error" and "cycle" in toast["message"]
    assert not plan.blocker_links.exists()
    foreign = services.task_create(workspace=workspace_create(title="Other"), summary="Foreign")
    response = hx(client, "post", f"/tasks/{build.id}/blockers/", {"blocked_by": [foreign.id]})
    assert triggers(response)["malamar:toast"]["level"] == "error"
    response = hx(client, "post", f"/tasks/{build.id}/blockers/", {})
    assert not build.blocker_links.exists()


def test_activity_log_tells_about_blockers(client, workspace):
    plan = services.task_create(workspace=workspace, summary="Plan")
    build = services.task_create(workspace=workspace, summary="Build", blocked_by=[plan.id])
    services.task_delete(task=plan)
    page = parse(html(hx(client, "get", f"/tasks/{build.id}/", target="task-log")))
    texts = [text.text for text in page.find_all("task-log__text")]
    assert any(text.endswith("made it wait for “Plan”") for text in texts), texts
    assert "“Plan”, which it waited for, was deleted" in texts
    assert any(text.startswith("No longer waiting for other tasks") for text in texts), texts


def test_the_new_task_dialog_refreshes_its_list_of_tasks(client, workspace):
    url = f"/workspaces/{workspace.id}/tasks/new/blockers/"
    assert 'hx-get="' + url in board(client, workspace)
    assert waits_for_field(html(hx(client, "get", url))) is None
    plan = services.task_create(workspace=workspace, summary="Plan")
    assert elements(html(hx(client, "get", url)), "option", value=plan.id)
