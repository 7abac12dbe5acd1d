"""A task, chat or workspace deleted while the worker flushes a run's live traces.

On PostgreSQL the cascade collected the run's traces, a flush in flight then committed one
more, and the runs' delete broke the foreign key at commit: the DELETE answered 500. The delete
now locks the runs first, so the flush in flight commits before and its trace goes too.
"""

import threading

import pytest
from django.db import connection, transaction
from django.utils import timezone

from chats.models import Chat
from chats.services import chat_create, chat_delete
from runner.models import AgentRun, RunStatus, TraceEvent
from tasks.models import Task
from tasks.services import task_create, task_delete
from tests import databases
from tests.live import wait_until
from workspaces.models import Workspace
from workspaces.services import workspace_create, workspace_row_delete

postgres_only = databases.postgres_only(
    "row locks between two connections (SQLite serializes writes)"
)


def _run(workspace, **owner) -> AgentRun:
    return AgentRun.objects.create(
        id=f"R{owner.get('task', owner.get('chat', workspace)).id}"[:21],
        workspace=workspace,
        agent_name="Planner",
        cli_type="claude",
        status=RunStatus.RUNNING,
        started_at=timezone.now(),
        **owner,
    )


def _backend_waits_for_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return bool(row) and row[0] == "Lock"


def _delete_during_a_flush(run: AgentRun, delete) -> list[Exception]:
    """A flush (the worker's agent_run_progress: the run's row, then a trace) holds its
    transaction open while `delete` runs in another connection until it waits for a lock;
    then the flush commits. Returns what the delete raised."""
    flushing, commit, errors, delete_pid = threading.Event(), threading.Event(), [], []

    def flush() -> None:
        try:
            with transaction.atomic():
                AgentRun.objects.filter(id=run.id).update(last_output_at=timezone.now())
                TraceEvent.objects.create(
                    run_id=run.id, seq=1, kind="output", text="late", created_at=timezone.now()
                )
                flushing.set()
                commit.wait(30)
        finally:
            connection.close()

    def remove() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                delete_pid.append(cursor.fetchone()[0])
            delete()
        except Exception as exc:  # reported by the test
            errors.append(exc)
        finally:
            connection.close()

    flusher = threading.Thread(target=flush)
    flusher.start()
    assert flushing.wait(30)
    remover = threading.Thread(target=remove)
    remover.start()
    wait_until(lambda: delete_pid, timeout=30, what="the delete's connection")
    wait_until(
        lambda: _backend_waits_for_a_lock(delete_pid[0]), timeout=30, what="the delete waiting"
    )
    commit.set()
    flusher.join(30)
    remover.join(30)
    return errors


@postgres_only
def test_a_task_deleted_while_its_run_flushes_traces_goes_whole(transactional_db):
    workspace = workspace_create(title="W")
    task = task_create(workspace=workspace, summary="T")
    run = _run(workspace, task=task)
    errors = _delete_during_a_flush(run, lambda: task_delete(task=Task.objects.get(id=task.id)))
    assert errors == []
    assert not Task.objects.filter(id=task.id).exists()
    assert not TraceEvent.objects.exists()


@postgres_only
def test_a_chat_deleted_while_its_run_flushes_traces_goes_whole(transactional_db):
    workspace = workspace_create(title="W")
    chat = chat_create(workspace=workspace, title="C")
    run = _run(workspace, chat=chat)
    errors = _delete_during_a_flush(run, lambda: chat_delete(chat=Chat.objects.get(id=chat.id)))
    assert errors == []
    assert not Chat.objects.filter(id=chat.id).exists()
    assert not TraceEvent.objects.exists()


@postgres_only
def test_a_workspace_deleted_while_a_run_flushes_traces_goes_whole(transactional_db):
    workspace = workspace_create(title="W")
    run = _run(workspace, task=task_create(workspace=workspace, summary="T"))
    errors = _delete_during_a_flush(
        run, lambda: workspace_row_delete(workspace=Workspace.objects.get(id=workspace.id))
    )
    assert errors == []
    assert not Workspace.objects.exists()
    assert not TraceEvent.objects.exists()


@pytest.fixture(autouse=True)
def _no_leftover_connections():
    yield
    connection.close()
