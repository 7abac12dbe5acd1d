"""Deleting what owns a running run (its task, chat or workspace) while the run writes its
trace rows, on PostgreSQL: the delete read the run's traces, the worker committed one more, and
the delete's commit failed the FOREIGN KEY (a 500 to the user, nothing deleted, the CLI kept
running; seen under load in tests/test_worker.py). The delete now locks the runs first: the
worker's write waits for it, then finds its run gone and writes nothing."""

import threading

from django.db import connection, connections
from django.db.models import QuerySet
from django.utils import timezone

from chats.services import chat_create, chat_delete
from runner.models import AgentRun, RunStatus, TraceEvent
from runner.services import agent_run_progress
from tasks.services import task_create, task_delete
from tests.databases import postgres_only
from tests.live import wait_until
from workspaces.models import Workspace
from workspaces.services import workspace_create, workspace_row_delete

pg_only = postgres_only("row locks between the server's delete and the worker's trace writes")


def _running(workspace, **owner) -> AgentRun:
    return AgentRun.objects.create(
        id=f"run{AgentRun.objects.count()}",
        workspace=workspace,
        agent_name="Planner",
        cli_type="claude",
        status=RunStatus.RUNNING,
        started_at=timezone.now(),
        **owner,
    )


def _trace(run: AgentRun, seq: int) -> TraceEvent:
    return TraceEvent(run_id=run.id, seq=seq, kind="output", text="…", created_at=timezone.now())


def _waits_on_a_lock() -> bool:
    """Asked in the delete's transaction: the statistics views' snapshot is cleared first."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return cursor.fetchone()[0] > 0


def _delete_with_a_trace_written_meanwhile(monkeypatch, run: AgentRun, delete) -> None:
    """`delete()`, with the worker writing a trace row of `run` (another connection, as the
    worker's thread) right after the delete removed the run's traces and before it removes the
    run: the write either commits there or waits for the delete's lock."""
    raw_delete = QuerySet._raw_delete
    writer = threading.Thread(target=_write_progress, args=(run,))

    def then_write(queryset, using):
        deleted = raw_delete(queryset, using)
        if queryset.model is TraceEvent and not writer.ident:
            writer.start()
            wait_until(
                lambda: not writer.is_alive() or _waits_on_a_lock(),
                timeout=60,
                what="the worker's write to commit or wait for the delete",
            )
        return deleted

    monkeypatch.setattr(QuerySet, "_raw_delete", then_write)
    try:
        delete()
    finally:
        monkeypatch.undo()
        if writer.ident:
            writer.join()
    assert writer.ident, "the delete removed no trace rows of the run"


def _write_progress(run: AgentRun) -> None:
    try:
        agent_run_progress(run_id=run.id, traces=[_trace(run, 2)], progress={}, event={})
    finally:
        connections.close_all()


def _gone(run: AgentRun) -> bool:
    return (
        not AgentRun.objects.filter(id=run.id).exists()
        and not TraceEvent.objects.filter(run_id=run.id).exists()
    )


@pg_only
def test_a_task_deleted_while_its_run_writes_traces_goes_with_them(transactional_db, monkeypatch):
    workspace = workspace_create(title="W")
    task = task_create(workspace=workspace, summary="Running", description="d")
    run = _running(workspace, task=task)
    TraceEvent.objects.bulk_create([_trace(run, 1)])
    _delete_with_a_trace_written_meanwhile(monkeypatch, run, lambda: task_delete(task=task))
    assert _gone(run)


@pg_only
def test_a_chat_deleted_while_its_run_writes_traces_goes_with_them(transactional_db, monkeypatch):
    workspace = workspace_create(title="W")
    chat = chat_create(workspace=workspace)
    run = _running(workspace, chat=chat)
    _delete_with_a_trace_written_meanwhile(monkeypatch, run, lambda: chat_delete(chat=chat))
    assert _gone(run)


@pg_only
def test_a_workspace_deleted_while_a_run_writes_traces_goes_with_them(
    transactional_db, monkeypatch
):
    workspace = workspace_create(title="W")
    run = _running(workspace, task=task_create(workspace=workspace, summary="S", description="d"))
    delete = lambda: workspace_row_delete(workspace=workspace)  # noqa: E731
    _delete_with_a_trace_written_meanwhile(monkeypatch, run, delete)
    assert _gone(run) and not Workspace.objects.filter(id=workspace.id).exists()
