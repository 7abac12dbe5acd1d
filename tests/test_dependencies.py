"""Task dependencies: a Todo task waits for its blockers (same workspace, no cycles), starts
when the last one is Done, and is told when a blocker is deleted or re-opened."""

import pytest

from core.actors import USER
from core.errors import ValidationFailed
from core.models import OutboxEvent
from tasks import selectors, services
from tasks.models import QueueStatus, Task, TaskDependency, TaskLog, TaskQueueItem, TaskStatus
from tests.conftest import error_of
from worker import pickup
from workspaces.services import workspace_create


def make(workspace, summary, **kwargs):
    return services.task_create(workspace=workspace, summary=summary, **kwargs)


def force_status(task, status):
    Task.objects.filter(id=task.id).update(status=status)
    task.status = status
    return task


def finish(task):
    """The user accepts a task: In Review → Done (through the service, with its rules)."""
    force_status(task, TaskStatus.IN_REVIEW)
    services.task_status_set(task=task, status=TaskStatus.DONE, actor=USER)
    return task


def log_types(task):
    return list(TaskLog.objects.filter(task=task).values_list("event_type", flat=True))


def next_task(workspace):
    item = pickup.next_item(workspace.id)
    return item.task.summary if item else None


@pytest.fixture
def chain(workspace):
    """plan ← build ← ship (each waits for the one before)."""
    plan = make(workspace, "Plan")
    build = make(workspace, "Build", blocked_by=[plan.id])
    ship = make(workspace, "Ship", blocked_by=[build.id])
    return plan, build, ship


@pytest.mark.pg
def test_a_blocked_task_is_not_picked_up_until_its_last_blocker_is_done(workspace):
    first, second = make(workspace, "First"), make(workspace, "Second")
    third = make(workspace, "Third", blocked_by=[first.id, second.id])
    assert next_task(workspace) == "Second"  # the newest eligible one (LIFO), never Third
    TaskQueueItem.objects.filter(task__in=[first, second]).delete()
    assert next_task(workspace) is None
    finish(first)
    assert next_task(workspace) is None
    assert not OutboxEvent.objects.filter(type="task.unblocked").exists()
    finish(second)
    assert next_task(workspace) == "Third"
    event = OutboxEvent.objects.get(type="task.unblocked")
    assert event.payload["task_id"] == third.id and event.payload["blocker_summary"] == "Second"
    assert log_types(third)[-1] == "unblocked"


@pytest.mark.pg
def test_queue_order_skips_blocked_tasks_and_keeps_the_usual_order(workspace):
    blocker = make(workspace, "Blocker")
    older = make(workspace, "Older")
    waiting = make(workspace, "Waiting", blocked_by=[blocker.id])
    newest = make(workspace, "Newest")
    services.comment_create_and_send_around(
        task=waiting, content="bump", actor=USER
    )  # newest item now
    assert next_task(workspace) == "Newest"
    TaskQueueItem.objects.filter(task=newest).delete()
    assert next_task(workspace) == "Older"
    services.task_prioritize_toggle(task=waiting)  # priority does not beat a blocker
    assert next_task(workspace) == "Older"
    assert pickup.workspaces_with_work() == {workspace.id: 2}  # Blocker and Older, not Waiting
    TaskQueueItem.objects.filter(task__in=[older, blocker]).delete()
    assert next_task(workspace) is None
    assert pickup.workspaces_with_work() == {}


@pytest.mark.pg
def test_the_claim_itself_refuses_a_task_that_waits(workspace):
    blocker = make(workspace, "Blocker")
    waiting = make(workspace, "Waiting", blocked_by=[blocker.id])
    item = TaskQueueItem.objects.get(task=waiting)
    assert TaskQueueItem.objects.claim(item.id) is False
    assert TaskQueueItem.objects.get(id=item.id).status == QueueStatus.QUEUED
    Task.objects.filter(id=blocker.id).update(status=TaskStatus.DONE)
    assert TaskQueueItem.objects.claim(item.id) is True


def test_an_in_progress_task_is_not_stopped_by_a_new_blocker(workspace):
    blocker = make(workspace, "Blocker")
    started = force_status(make(workspace, "Started"), TaskStatus.IN_PROGRESS)
    services.task_blockers_set(task=started, blocker_ids=[blocker.id])
    TaskQueueItem.objects.filter(task=blocker).delete()
    assert next_task(workspace) == "Started"


def test_cycles_are_refused_with_a_clear_message(chain):
    plan, build, ship = chain
    with pytest.raises(ValidationFailed) as err:
        services.task_blockers_set(task=plan, blocker_ids=[ship.id])
    assert err.value.field == "blocked_by"
    assert "“Ship” already waits for this task" in err.value.message
    assert "cycle" in err.value.message
    with pytest.raises(ValidationFailed, match="cannot wait for itself"):
        services.task_blockers_set(task=plan, blocker_ids=[plan.id])
    with pytest.raises(ValidationFailed, match="cycle"):
        services.task_dependency_add(task=build, blocker=ship)
    assert TaskDependency.objects.count() == 2
    # Replacing a task's own links is no cycle: Ship may wait for Plan instead of Build.
    services.task_blockers_set(task=ship, blocker_ids=[plan.id])
    assert selectors.blocked_by_ids(ship) == [plan.id]


def test_cross_workspace_and_unknown_blockers_are_refused(workspace):
    other = workspace_create(title="Other")
    foreign = make(other, "Foreign")
    with pytest.raises(ValidationFailed, match="another workspace"):
        make(workspace, "Mine", blocked_by=[foreign.id])
    with pytest.raises(ValidationFailed, match="No task with id nope"):
        make(workspace, "Mine", blocked_by=["nope"])
    with pytest.raises(ValidationFailed, match="list of task ids"):
        make(workspace, "Mine", blocked_by="abc")
    assert not Task.objects.filter(summary="Mine").exists()  # nothing half-created


@pytest.mark.pg
def test_a_huge_list_of_unknown_ids_is_a_short_message(api, workspace):
    task = make(workspace, "T")
    ids = ["x" * 100_000, *(f"id{n}" for n in range(50_000))]
    response = api.put(f"/api/tasks/{task.id}", {"blocked_by": ids})
    message = error_of(response)["message"]
    assert response.status_code == 400 and message.startswith("No task with id xxx")
    assert len(message) < 300 and "and 50000 more" in message


def test_setting_blockers_logs_each_change(workspace):
    a, b = make(workspace, "A"), make(workspace, "B")
    task = make(workspace, "T", blocked_by=[a.id])
    services.task_blockers_set(task=task, blocker_ids=[b.id])
    assert log_types(task)[-3:] == ["blocker_added", "blocker_removed", "blocker_added"]
    before = TaskLog.objects.count()
    services.task_blockers_set(task=task, blocker_ids=[b.id])  # no change: nothing written
    assert TaskLog.objects.count() == before
    services.task_dependency_remove(task=task, blocker=b)
    assert selectors.blocked_by_ids(task) == []
    assert OutboxEvent.objects.filter(type="task.unblocked", payload__task_id=task.id).exists()


def test_deleting_a_blocker_unblocks_with_an_activity_log_line(chain):
    plan, build, ship = chain
    services.task_delete(task=plan)
    assert log_types(build)[-2:] == ["blocker_deleted", "unblocked"]
    entries = [e["text"] for e in selectors.activity_entries(build)]
    assert "“Plan”, which it waited for, was deleted" in entries
    assert selectors.blocked_by_ids(build) == []
    assert next_task(build.workspace) == "Build"
    assert OutboxEvent.objects.filter(type="task.unblocked", payload__task_id=build.id).exists()
    assert "unblocked" not in log_types(ship)  # still waits for Build


def test_a_blocker_moved_back_out_of_done_reblocks_tasks_not_started(chain):
    plan, build, _ship = chain
    finish(plan)
    assert next_task(plan.workspace) == "Build"
    services.task_status_set(task=plan, status=TaskStatus.TODO, actor=USER)  # re-opened
    assert log_types(build)[-1] == "blocked_again"
    assert OutboxEvent.objects.filter(type="task.blocked", payload__task_id=build.id).exists()
    assert next_task(plan.workspace) == "Plan"
    TaskQueueItem.objects.filter(task=plan).delete()
    assert next_task(plan.workspace) is None
    # A dependent that already started goes on.
    finish(plan)
    force_status(build, TaskStatus.IN_PROGRESS)
    services.task_status_set(task=plan, status=TaskStatus.TODO, actor=USER)
    assert log_types(build)[-1] != "blocked_again"
    TaskQueueItem.objects.filter(task=plan).delete()
    assert next_task(plan.workspace) == "Build"


def test_selectors_show_what_a_task_waits_for(chain):
    plan, build, _ship = chain
    [card] = selectors.attach_blockers([Task.objects.get(id=build.id)])
    assert [b.summary for b in card.open_blockers] == ["Plan"] and card.is_waiting
    assert [t.summary for t in selectors.dependents_of(plan)] == ["Build"]


# --- JSON API -------------------------------------------------------------------------------


def test_api_creates_lists_and_changes_blockers(api, workspace):
    plan = api.post(f"/api/workspaces/{workspace.id}/tasks", {"summary": "Plan"}).json()
    assert plan["blocked_by"] == [] and plan["is_waiting"] is False
    response = api.post(
        f"/api/workspaces/{workspace.id}/tasks", {"summary": "Build", "blocked_by": [plan["id"]]}
    )
    assert response.status_code == 201, response.content
    build = response.json()
    assert build["blocked_by"] == [plan["id"]] and build["is_waiting"] is True
    listed = api.get(f"/api/workspaces/{workspace.id}/tasks").json()["tasks"]
    assert {t["summary"]: t["is_waiting"] for t in listed} == {"Plan": False, "Build": True}
    response = api.put(f"/api/tasks/{build['id']}", {"blocked_by": []})
    assert response.json()["blocked_by"] == []
    response = api.post(f"/api/tasks/{build['id']}/blockers", {"blocker_id": plan["id"]})
    assert response.status_code == 201 and response.json()["blocked_by"] == [plan["id"]]
    response = api.delete(f"/api/tasks/{build['id']}/blockers/{plan['id']}")
    assert response.status_code == 200 and response.json()["blocked_by"] == []


def test_api_refuses_cycles_and_other_workspaces_with_400(api, workspace):
    plan = make(workspace, "Plan")
    build = make(workspace, "Build", blocked_by=[plan.id])
    response = api.post(f"/api/tasks/{plan.id}/blockers", {"blocker_id": build.id})
    assert response.status_code == 400
    assert "cycle" in error_of(response)["message"]
    response = api.put(f"/api/tasks/{plan.id}", {"summary": "Renamed", "blocked_by": [build.id]})
    assert response.status_code == 400
    assert Task.objects.get(id=plan.id).summary == "Plan"  # nothing half-applied
    foreign = make(workspace_create(title="Other"), "Foreign")
    response = api.post(
        f"/api/workspaces/{workspace.id}/tasks", {"summary": "X", "blocked_by": [foreign.id]}
    )
    assert response.status_code == 400
    assert "another workspace" in error_of(response)["message"]
    response = api.post(f"/api/tasks/{plan.id}/blockers", {"blocker_id": "missing"})
    assert response.status_code == 404


def test_blockers_given_together_keep_their_order(workspace):
    first, second, third = (make(workspace, name) for name in ("One", "Two", "Three"))
    for _ in range(3):  # ids are random: a tie broken by id would shuffle them
        task = make(workspace, "Waits", blocked_by=[third.id, first.id, second.id])
        assert selectors.blocked_by_ids(task) == [third.id, first.id, second.id]
