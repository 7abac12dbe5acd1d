"""Task rules: queue create/bump, status moves by actor, comments, priority, cancel, deletes."""

import pytest

from core.actors import MCP_AGENT, SYSTEM, USER, Actor, agent_actor
from core.errors import Conflict, ValidationFailed
from core.models import OutboxEvent
from tasks import selectors, services
from tasks.models import QueueStatus, Task, TaskComment, TaskLog, TaskQueueItem, TaskStatus
from tests.failures import fail_task
from workspaces.models import Workspace

AGENT = Actor("agent", "a" * 21, "Reviewer")
ALL = list(TaskStatus.values)


def queued(task):
    return TaskQueueItem.objects.filter(task=task, status=QueueStatus.QUEUED)


def force_status(task, status):
    Task.objects.filter(id=task.id).update(status=status)
    task.status = status
    return task


def test_create_task_makes_queue_item_log_and_event(task):
    assert queued(task).count() == 1
    assert list(TaskLog.objects.filter(task=task).values_list("event_type", flat=True)) == [
        "task_created"
    ]
    event = OutboxEvent.objects.filter(type="task.created").get()
    assert event.payload["task_id"] == task.id
    assert event.payload["workspace_id"] == task.workspace_id
    assert event.payload["task_summary"] == "Add a login page"


def test_create_task_requires_summary(workspace):
    with pytest.raises(ValidationFailed) as err:
        services.task_create(workspace=workspace, summary="   ")
    assert err.value.field == "summary"


def test_create_task_bumps_workspace_activity(workspace):
    before = Workspace.objects.get(id=workspace.id).last_activity_at
    services.task_create(workspace=workspace, summary="x")
    assert Workspace.objects.get(id=workspace.id).last_activity_at > before


@pytest.mark.pg
def test_comment_bumps_existing_queued_item_instead_of_duplicating(task):
    item = queued(task).get()
    services.comment_create_and_send_around(task=task, content="more detail", actor=USER)
    assert queued(task).count() == 1
    assert queued(task).get().updated_at > item.updated_at


def test_comment_creates_queue_item_when_none_is_queued(task):
    queued(task).update(status=QueueStatus.COMPLETED)
    services.comment_create_and_send_around(task=task, content="again", actor=AGENT)
    assert queued(task).count() == 1


@pytest.mark.parametrize("actor", [USER, AGENT, SYSTEM])
def test_comment_on_done_task_does_not_queue(task, actor):
    queued(task).delete()
    force_status(task, TaskStatus.DONE)
    services.comment_create_and_send_around(task=task, content="late note", actor=actor)
    assert queued(task).count() == 0
    assert Task.objects.get(id=task.id).status == TaskStatus.DONE


@pytest.mark.parametrize("actor", [USER, AGENT, MCP_AGENT])
def test_a_comment_on_an_in_review_task_sends_it_back_whoever_wrote_it(task, actor):
    """DESIGN "No lost comment": a person's, an agent's or one through Malamar's MCP server."""
    force_status(task, TaskStatus.IN_REVIEW)
    queued(task).delete()
    services.comment_create_and_send_around(
        task=task, content="Please also add a logout button", actor=actor
    )
    task.refresh_from_db()
    assert task.status == TaskStatus.TODO
    assert queued(task).count() == 1
    change = TaskLog.objects.filter(task=task, event_type="status_changed").get()
    assert change.metadata == {"old_status": "in_review", "new_status": "todo"}
    assert (change.actor_type, change.actor_id) == (actor.type, actor.id)


def test_a_comment_reads_the_tasks_status_as_committed_not_as_loaded(task):
    """The page loaded the task In Progress; its pass ended (In Review) before the comment was
    written: the comment still sends it back (it was left In Review with a dead queue item)."""
    loaded = Task.objects.get(id=task.id)
    force_status(task, TaskStatus.IN_REVIEW)
    services.comment_create_and_send_around(task=loaded, content="one more thing", actor=USER)
    assert Task.objects.get(id=task.id).status == TaskStatus.TODO


def test_a_plain_comment_sends_nothing_around(task):
    """comment_create writes the comment only (a pass's end decides about its own agents')."""
    force_status(task, TaskStatus.IN_REVIEW)
    queued(task).delete()
    services.comment_create(task=task, content="note", actor=AGENT)
    assert Task.objects.get(id=task.id).status == TaskStatus.IN_REVIEW
    assert not queued(task).exists()


def test_comment_log_and_event_carry_no_content(task):
    services.comment_create(task=task, content="secret plan", actor=AGENT)
    log = TaskLog.objects.filter(task=task, event_type="comment_added").get()
    assert log.metadata == {}
    assert log.actor_type == "agent" and log.actor_id == AGENT.id
    event = OutboxEvent.objects.filter(type="task.comment_added").get()
    assert event.payload["author_name"] == "Reviewer"
    assert "secret plan" not in str(event.payload)


def test_comment_requires_content(task):
    with pytest.raises(ValidationFailed):
        services.comment_create(task=task, content="  \n ", actor=USER)


def test_comment_author_ids(task):
    user = services.comment_create(task=task, content="u", actor=USER)
    agent = services.comment_create(task=task, content="a", actor=AGENT)
    system = services.comment_create(task=task, content="s", actor=SYSTEM)
    assert (user.user_id, user.agent_id) == ("0" * 21, None)
    assert (agent.user_id, agent.agent_id) == (None, AGENT.id)
    assert (system.user_id, system.agent_id) == (None, None)


USER_ALLOWED = {("in_progress", "in_review"), ("in_review", "todo"), ("in_review", "done")}
USER_ALLOWED |= {("done", "todo")}
AGENT_ALLOWED = {("in_progress", "in_review")}
SYSTEM_ALLOWED = {("todo", "in_progress"), ("todo", "in_review"), ("in_progress", "todo")}
SYSTEM_ALLOWED |= {("in_progress", "in_review")}
MOVES = [(a, b) for a in ALL for b in ALL if a != b]


@pytest.mark.parametrize(
    "actor,allowed", [(USER, USER_ALLOWED), (AGENT, AGENT_ALLOWED), (SYSTEM, SYSTEM_ALLOWED)]
)
@pytest.mark.parametrize("old,new", MOVES)
def test_every_status_move_by_every_actor(task, actor, allowed, old, new):
    force_status(task, old)
    if (old, new) in allowed:
        services.task_status_set(task=task, status=new, actor=actor)
        assert Task.objects.get(id=task.id).status == new
        log = TaskLog.objects.filter(task=task, event_type="status_changed").get()
        assert log.metadata == {"old_status": old, "new_status": new}
        assert log.actor_type == actor.type
        event = OutboxEvent.objects.filter(type="task.status_changed").get()
        assert (event.payload["old_status"], event.payload["new_status"]) == (old, new)
    else:
        with pytest.raises(Conflict):
            services.task_status_set(task=task, status=new, actor=actor)
        assert Task.objects.get(id=task.id).status == old


def test_only_the_user_moves_to_done(task):
    force_status(task, TaskStatus.IN_REVIEW)
    for actor in (AGENT, SYSTEM):
        with pytest.raises(Conflict):
            services.task_status_set(task=task, status=TaskStatus.DONE, actor=actor)
    services.task_status_set(task=task, status=TaskStatus.DONE, actor=USER)


def test_unknown_status_is_a_validation_error(task):
    with pytest.raises(ValidationFailed):
        services.task_status_set(task=task, status="archived", actor=USER)


@pytest.mark.parametrize("old", ["done", "in_review"])
def test_user_move_back_to_todo_queues_the_task(task, old):
    queued(task).delete()
    force_status(task, old)
    services.task_status_set(task=task, status=TaskStatus.TODO, actor=USER)
    assert queued(task).count() == 1


@pytest.mark.pg
def test_move_back_to_todo_bumps_instead_of_duplicating(task):
    force_status(task, TaskStatus.IN_REVIEW)
    services.task_status_set(task=task, status=TaskStatus.TODO, actor=USER)
    assert queued(task).count() == 1


def test_user_moving_a_running_task_requests_a_stop(task):
    force_status(task, TaskStatus.IN_PROGRESS)
    queued(task).update(status=QueueStatus.IN_PROGRESS)
    services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=USER)
    item = TaskQueueItem.objects.get(task=task)
    assert item.stop_requested_at is not None


def test_runner_demotion_does_not_stop_itself(task):
    force_status(task, TaskStatus.IN_PROGRESS)
    queued(task).update(status=QueueStatus.IN_PROGRESS)
    services.task_status_set(task=task, status=TaskStatus.TODO, actor=SYSTEM)
    assert TaskQueueItem.objects.get(task=task).stop_requested_at is None


@pytest.mark.pg
def test_prioritize_is_exclusive_per_workspace(workspace):
    first = services.task_create(workspace=workspace, summary="first")
    second = services.task_create(workspace=workspace, summary="second")
    services.task_prioritize_toggle(task=first)
    assert Task.objects.get(id=first.id).is_priority
    assert queued(first).get().is_priority
    services.task_prioritize_toggle(task=second)
    assert not Task.objects.get(id=first.id).is_priority
    assert not queued(first).get().is_priority
    assert Task.objects.get(id=second.id).is_priority
    assert Task.objects.filter(workspace=workspace, is_priority=True).count() == 1
    events = list(TaskLog.objects.filter(task=first).values_list("event_type", flat=True))
    assert events[-2:] == ["task_prioritized", "task_deprioritized"]


def test_prioritize_toggles_off(task):
    services.task_prioritize_toggle(task=task)
    services.task_prioritize_toggle(task=task)
    assert not Task.objects.get(id=task.id).is_priority
    assert TaskLog.objects.filter(task=task, event_type="task_deprioritized").count() == 1


def test_priority_in_other_workspace_is_independent(task):
    from workspaces.services import workspace_create

    other = services.task_create(workspace=workspace_create(title="Other"), summary="o")
    services.task_prioritize_toggle(task=task)
    services.task_prioritize_toggle(task=other)
    assert Task.objects.get(id=task.id).is_priority


@pytest.mark.parametrize("status", ["in_review", "done"])
def test_prioritize_refused_outside_todo_and_in_progress(task, status):
    force_status(task, status)
    with pytest.raises(Conflict):
        services.task_prioritize_toggle(task=task)


def test_priority_copied_to_new_queue_items_and_cleared_on_leaving(task):
    services.task_prioritize_toggle(task=task)
    queued(task).update(status=QueueStatus.COMPLETED)
    services.comment_create_and_send_around(task=task, content="go", actor=USER)
    assert queued(task).get().is_priority
    force_status(task, TaskStatus.IN_PROGRESS)
    services.task_status_set(task=task, status=TaskStatus.IN_REVIEW, actor=AGENT)
    assert not Task.objects.get(id=task.id).is_priority
    assert not queued(task).get().is_priority


def test_cancel_moves_to_review_with_system_comment_and_stop_request(task):
    force_status(task, TaskStatus.IN_PROGRESS)
    queued(task).update(status=QueueStatus.IN_PROGRESS)
    services.task_cancel(task=task)
    task.refresh_from_db()
    assert task.status == TaskStatus.IN_REVIEW
    comment = TaskComment.objects.get(task=task)
    assert comment.content == "Task cancelled by user"
    assert comment.user_id is None and comment.agent_id is None
    assert TaskLog.objects.filter(task=task, event_type="task_cancelled").exists()
    running = TaskQueueItem.objects.get(task=task, status=QueueStatus.IN_PROGRESS)
    assert running.stop_requested_at is not None


@pytest.mark.parametrize("status", ["todo", "in_review", "done"])
def test_cancel_only_for_in_progress(task, status):
    force_status(task, status)
    with pytest.raises(Conflict):
        services.task_cancel(task=task)


def test_delete_task_cascades(task):
    services.comment_create(task=task, content="c", actor=USER)
    task_id = task.id
    services.task_delete(task=task)
    assert not TaskComment.objects.exists()
    assert not TaskLog.objects.exists()
    assert not TaskQueueItem.objects.exists()
    assert OutboxEvent.objects.filter(type="task.deleted").get().payload["task_id"] == task_id


def test_delete_all_done_tasks_only_touches_done(workspace):
    keep = services.task_create(workspace=workspace, summary="keep")
    gone = [services.task_create(workspace=workspace, summary=f"done {i}") for i in range(3)]
    for t in gone:
        force_status(t, TaskStatus.DONE)
    assert services.tasks_delete_done(workspace=workspace) == 3
    assert list(Task.objects.values_list("id", flat=True)) == [keep.id]


def test_update_summary_and_description(task):
    services.task_update(task=task, summary="New title", description="New body")
    task.refresh_from_db()
    assert (task.summary, task.description) == ("New title", "New body")
    assert OutboxEvent.objects.filter(type="task.updated").exists()


def test_done_tasks_are_kept_unless_auto_delete_is_on(workspace):
    from datetime import timedelta

    from django.utils import timezone

    assert workspace.auto_delete_done_tasks is False  # the default (issue 29)
    old = services.task_create(workspace=workspace, summary="old")
    fresh = services.task_create(workspace=workspace, summary="fresh")
    unmerged = services.task_create(workspace=workspace, summary="finished without merging")
    for t in (old, fresh, unmerged):
        force_status(t, TaskStatus.DONE)
    Task.objects.filter(id=unmerged.id).update(branch_name="malamar/kept", branch_base="main")
    long_ago = timezone.now() - timedelta(days=8)
    Task.objects.filter(id__in=[old.id, unmerged.id]).update(updated_at=long_ago)
    assert services.tasks_delete_expired() == 0  # kept: auto-delete is off
    Workspace.objects.filter(id=workspace.id).update(auto_delete_done_tasks=True)
    assert services.tasks_delete_expired() == 1
    # The branch kept unmerged keeps its task: the person deletes it.
    assert set(Task.objects.values_list("id", flat=True)) == {fresh.id, unmerged.id}


# --- failing runs: the error state, "Retry now", "Stop retrying" -----------------------------


def test_comment_kind_is_stored_when_the_comment_is_written(task):
    kinds = [
        services.comment_create(task=task, content="u", actor=USER).kind,
        services.comment_create(task=task, content="a", actor=AGENT).kind,
        services.comment_create(task=task, content="CLI exited with code 1", actor=SYSTEM).kind,
        services.comment_create(task=task, content="x", actor=SYSTEM, kind="error").kind,
    ]
    assert kinds == ["user", "agent", "system", "error"]
    assert list(TaskComment.objects.order_by("created_at").values_list("kind", flat=True)) == kinds
    for actor in (USER, AGENT):
        with pytest.raises(ValidationFailed):
            services.comment_create(task=task, content="x", actor=actor, kind="error")


def test_run_failed_counts_backs_off_and_writes_an_error_comment(task):
    from django.utils import timezone

    force_status(task, TaskStatus.IN_PROGRESS)
    queued(task).update(status=QueueStatus.FAILED)
    before = timezone.now()
    assert fail_task(task, "CLI exited with code 1. 401") == 1
    assert fail_task(task, "CLI exited with code 1. 401") == 2
    task.refresh_from_db()
    assert task.failure_streak == 2
    wait = (task.retry_not_before - before).total_seconds()
    assert 10 <= wait < 12, "the second failure waits 10 s"
    errors = TaskComment.objects.filter(task=task).values_list("kind", "content")
    assert list(errors) == [("error", "CLI exited with code 1. 401")] * 2
    assert queued(task).count() == 1, "the pass continues later"
    event = OutboxEvent.objects.filter(type="task.error_occurred").order_by("id").last()
    assert event.payload["failure_streak"] == 2
    assert event.payload["retry_not_before"] == task.retry_not_before.isoformat()
    assert event.payload["error_message"] == "CLI exited with code 1. 401"


def test_run_succeeded_ends_the_failure_streak_and_tells_the_page(task):
    services.task_run_succeeded(task=task)
    assert not OutboxEvent.objects.filter(type="task.updated").exists(), "nothing was failing"
    fail_task(task, "boom")
    services.task_run_succeeded(task=task)
    task.refresh_from_db()
    assert (task.failure_streak, task.retry_not_before) == (0, None)
    assert OutboxEvent.objects.filter(type="task.updated").count() == 1


def failing(task, status=TaskStatus.IN_PROGRESS):
    force_status(task, status)
    fail_task(task, "CLI could not be started: no binary")
    task.refresh_from_db()
    return task


def test_retry_now_clears_the_back_off_and_queues_the_task(task):
    from worker import pickup

    failing(task)
    assert pickup.next_item(task.workspace_id) is None, "waiting out the back-off"
    queued(task).delete()
    services.task_retry_now(task=task)
    task.refresh_from_db()
    assert (task.failure_streak, task.retry_not_before) == (1, None), "the streak stays"
    assert pickup.next_item(task.workspace_id).task_id == task.id
    assert TaskLog.objects.filter(task=task, event_type="retry_requested").exists()
    assert OutboxEvent.objects.filter(type="task.updated").exists()


@pytest.mark.pg
def test_retry_now_does_not_queue_a_second_pass_while_one_runs(task):
    failing(task)
    queued(task).update(status=QueueStatus.IN_PROGRESS)
    services.task_retry_now(task=task)
    unfinished = TaskQueueItem.objects.filter(task=task).exclude(status=QueueStatus.FAILED)
    assert list(unfinished.values_list("status", flat=True)) == ["in_progress"]


def test_stop_retrying_moves_to_todo_drops_the_retry_and_stops_a_running_try(task):
    from worker import pickup

    failing(task)
    running = TaskQueueItem.objects.create(
        task=task, workspace_id=task.workspace_id, status=QueueStatus.IN_PROGRESS
    )
    services.task_retries_stop(task=task)
    task.refresh_from_db()
    assert task.status == TaskStatus.TODO
    assert (task.failure_streak, task.retry_not_before) == (1, None), "the card still says why"
    assert not queued(task).exists()
    running.refresh_from_db()
    assert running.stop_requested_at is not None
    task.retry_not_before = None
    Task.objects.filter(id=task.id).update(retry_not_before=None)
    assert pickup.next_item(task.workspace_id) is None, "nothing retries it"
    assert TaskLog.objects.filter(task=task, event_type="retries_stopped").exists()
    # "Retry now" (or a comment) runs it again.
    services.task_retry_now(task=task)
    assert pickup.next_item(task.workspace_id).task_id == task.id


@pytest.mark.parametrize("status", [TaskStatus.IN_REVIEW, TaskStatus.DONE])
def test_retry_and_stop_only_for_failing_runnable_tasks(task, status):
    force_status(task, TaskStatus.IN_PROGRESS)
    for action in (services.task_retry_now, services.task_retries_stop):
        with pytest.raises(Conflict):
            action(task=task)  # not failing
    failing(task, status)
    for action in (services.task_retry_now, services.task_retries_stop):
        with pytest.raises(Conflict):
            action(task=task)


@pytest.mark.pg
@pytest.mark.django_db(transaction=True)
def test_migration_stores_kinds_for_existing_comments():
    from django.db import connection

    from tests.migration_history import originals_executor

    executor = originals_executor(connection)
    old = executor.migrate([("tasks", "0001_initial")]).apps
    workspace = old.get_model("workspaces", "Workspace").objects.create(id="w" * 21, title="W")
    task = old.get_model("tasks", "Task").objects.create(
        id="t" * 21, workspace=workspace, summary="s"
    )
    rows = {
        "user": {"user_id": "0" * 21, "content": "CLI exited with code 1 (my words)"},
        "agent": {"agent_id": "a" * 21, "content": "CLI could not be started: quoted"},
        "cancel": {"content": "Task cancelled by user"},
        "exit": {"content": "CLI exited with code 1. 401 Unauthorized"},
        "binary": {"content": "CLI could not be started: Binary not found in PATH (claude)"},
        "json": {"content": "CLI output was not valid JSON: Expecting value"},
        "internal": {"content": "Malamar hit an internal error (KeyError: 'x')."},
        "folder": {"content": "Working directory /x does not exist. Create it or change it."},
        "other": {"content": "Something else the system said"},
    }
    Comment = old.get_model("tasks", "TaskComment")
    for name, fields in rows.items():
        Comment.objects.create(id=name.ljust(21, "_"), task=task, workspace=workspace, **fields)
    executor = originals_executor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    kinds = dict(TaskComment.objects.values_list("id", "kind"))
    assert {name: kinds[name.ljust(21, "_")] for name in rows} == {
        "user": "user",
        "agent": "agent",
        "cancel": "system",
        "exit": "error",
        "binary": "error",
        "json": "error",
        "internal": "error",
        "folder": "error",
        "other": "system",
    }


def test_the_last_agent_comment_is_what_an_agent_said_last(task, agents):
    """An In Review mail quotes it: the user's and the system's comments do not count."""
    assert selectors.last_agent_comment(task) == ""
    planner, implementer = (agent_actor(agent) for agent in agents[:2])
    services.comment_create(task=task, content="Plan: two steps.", actor=planner)
    services.comment_create(task=task, content="Both done.", actor=implementer)
    services.comment_create(task=task, content="Thanks!", actor=USER)
    assert selectors.last_agent_comment(task) == "Both done."


def test_an_agents_input_history_is_oldest_first(task):
    services.comment_create(task=task, content="first", actor=USER)
    services.comment_create(task=task, content="second", actor=USER)
    comments, logs = selectors.task_history(task)
    assert [comment.content for comment in comments] == ["first", "second"]
    assert logs == selectors.logs_for_task(task) and logs[0].event_type == "task_created"
