"""Runner pieces without processes: schemas, output parsing, CLIs, pickup order, back-off."""

import dataclasses
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from core.actors import USER
from core.compiled_queries import compiled_models, compiled_rows, insert, update_row
from core.models import OutboxEvent
from runner import files
from runner.clis import CLIS, cli_for
from runner.clis.base import stderr_message
from runner.files import data_subdir, task_input_path, write_private
from runner.models import AgentRun, TraceEvent
from runner.models import Worker as WorkerRow
from runner.schemas import InvalidOutput, chat_schema, parse_task_output, task_schema
from runner.services import worker_register
from runner.streams import Trace, parse_line
from tasks import selectors as task_selectors
from tasks import services as task_services
from tasks.models import QueueStatus, Task, TaskComment, TaskQueueItem, TaskStatus
from tasks.services import (
    comment_create,
    retry_delay,
    task_create,
    task_prioritize_toggle,
)
from tests.conftest import cli_invocation
from tests.databases import ON_POSTGRES, postgres_only
from tests.failures import fail_task
from tests.live import wait_until
from tests.stack import FAKES_BIN
from worker import pickup, process, prompts
from worker.execution import RUN_CONFIG_DIR, execute, interpret, mcp_server_for
from worker.pipeline import task_input_text
from worker.process import ProcessResult
from workspaces.models import Workspace
from workspaces.services import workspace_create

ROOT = Path(__file__).resolve().parent.parent


def walk_objects(schema):
    if isinstance(schema, dict):
        if schema.get("type") == "object" or schema.get("type") == ["object"]:
            yield schema
        for value in schema.values():
            yield from walk_objects(value)
    elif isinstance(schema, list):
        for value in schema:
            yield from walk_objects(value)


@pytest.mark.parametrize(
    "schema", [task_schema(), chat_schema(malamar=False), chat_schema(malamar=True)]
)
def test_schemas_follow_openai_strict_rules(schema):
    objects = list(walk_objects(schema))
    assert objects, "schema has objects"
    for obj in objects:
        assert obj["additionalProperties"] is False
        assert sorted(obj["required"]) == sorted(obj["properties"])


def test_optional_fields_are_nullable_in_strict_form():
    action = task_schema()["properties"]["actions"]["items"]
    assert action["properties"]["content"]["type"] == ["string", "null"]
    assert action["properties"]["status"]["enum"] == ["in_review", None]
    malamar = chat_schema(malamar=True)["properties"]["actions"]["items"]["properties"]
    assert "create_agent" in malamar["type"]["enum"]
    assert malamar["retention_days"]["type"] == ["integer", "null"]
    agent = chat_schema(malamar=False)["properties"]["actions"]["items"]["properties"]
    assert agent["type"]["enum"] == ["rename_chat", "create_task"]
    assert "instruction" not in agent


@pytest.mark.parametrize(
    "data,action_type,comments",
    [
        ({"actions": []}, "skip", ()),
        ({"actions": [{"type": "skip"}]}, "skip", ()),
        ({"actions": [{"type": "comment", "content": "hi", "status": None}]}, "comment", ("hi",)),
        (
            {
                "actions": [
                    {"type": "comment", "content": "q?"},
                    {"type": "change_status", "status": "in_review"},
                ]
            },
            "in_review",
            ("q?",),
        ),
    ],
)
def test_task_output_parsing(data, action_type, comments):
    outcome = parse_task_output(data)
    assert outcome.action_type == action_type and outcome.comments == comments


@pytest.mark.parametrize(
    "data",
    [
        [],
        {"action": []},
        {"actions": "skip"},
        {"actions": [{"type": "comment", "content": ""}]},
        {"actions": [{"type": "comment"}]},
        {"actions": [{"type": "change_status", "status": "done"}]},
        {"actions": [{"type": "delete_repo"}]},
        {"actions": ["skip"]},
    ],
)
def test_invalid_task_output(data):
    with pytest.raises(InvalidOutput):
        parse_task_output(data)


def test_clis_build_the_measured_argv(tmp_path):
    inv = cli_invocation(tmp_path, include_dirs=("/t", "/kb"))
    claude = CLIS["claude"].command(inv)
    assert claude.argv[:8] == [
        "/bin/cli",
        "-p",
        inv.prompt,
        "--dangerously-skip-permissions",
        "--output-format",
        "stream-json",
        "--verbose",
        "--json-schema",
    ]
    assert json.loads(claude.argv[8]) == task_schema() and claude.stdin is None
    gemini = CLIS["gemini"].command(inv).argv
    assert gemini == [
        "/bin/cli",
        "-p",
        inv.prompt,
        "--yolo",
        "--skip-trust",
        "--include-directories",
        "/t,/kb",
        "-o",
        "stream-json",
    ]
    codex = CLIS["codex"].command(inv).argv
    assert codex == [
        "/bin/cli",
        "exec",
        "--dangerously-bypass-approvals-and-sandbox",
        "--skip-git-repo-check",
        "--json",
        "--output-schema",
        str(inv.schema_path),
        "-o",
        str(inv.output_path),
        inv.prompt,
    ]
    opencode = CLIS["opencode"].command(inv)
    assert opencode.argv == [
        *["/bin/cli", "run", "--auto", "--format", "json"],
        *["--print-logs", "--log-level", "WARN"],
    ]
    assert opencode.stdin == inv.prompt.encode()


def test_claude_structured_output_and_is_error():
    sample = (
        Path(__file__).resolve().parents[2] / "shared/cli-samples/claude_json_schema_result.json"
    )
    stdout = (
        sample.read_text()
        if sample.exists()
        else json.dumps(
            {"type": "result", "is_error": False, "structured_output": {"name": "fake", "n": 1}}
        )
    )
    assert CLIS["claude"].read_stdout(stdout).structured == {"name": "fake", "n": 1}
    failed = json.dumps(
        {"type": "result", "subtype": "success", "is_error": True, "result": "Invalid API key"}
    )
    assert CLIS["claude"].read_stdout(failed).error == "Invalid API key"


def result(**kwargs) -> ProcessResult:
    return ProcessResult(**{"exit_code": 0, **kwargs})


def test_interpret_follows_the_spec_error_order(tmp_path):
    out = tmp_path / "out.json"
    bad_exit = interpret(
        "gemini", result(exit_code=145, stderr='{"error": {"message": "401"}}'), out
    )
    assert bad_exit.error == "401 (CLI exited with code 145)"
    assert interpret("codex", result(), out).error.startswith(
        "CLI completed but output file was not created at "
    )
    out.write_text("  \n")
    assert interpret("codex", result(), out).error == "CLI completed but output file was empty"
    out.write_text("{nope")
    assert interpret("codex", result(), out).error.startswith("CLI output was not valid JSON:")
    out.write_text('```json\n{"actions": []}\n```')
    assert interpret("codex", result(), out).data == {"actions": []}
    claude_error = json.dumps({"type": "result", "is_error": True, "result": "Overloaded"})
    assert interpret("claude", result(stdout=claude_error), out).error == (
        "CLI reported an error: Overloaded"
    )


def test_root_claude_error_explains_the_fix():
    stderr = "--dangerously-skip-permissions cannot be used with root/sudo privileges"
    execution = interpret("claude", result(exit_code=1, stderr=stderr), Path("/nonexistent"))
    assert "IS_SANDBOX=1" in execution.error


def test_an_mcp_configuration_that_cannot_be_written_is_a_run_error(tmp_path):
    """The run's MCP config file cannot be written (here a folder is in the way): the run
    ends with an error the user sees, the CLI is not started without its tools."""
    output = tmp_path / "malamar_output_ab12.json"
    in_the_way = data_subdir(RUN_CONFIG_DIR) / "malamar_output_ab12_mcp.json"
    in_the_way.mkdir()
    server = mcp_server_for(SimpleNamespace(id="w1", mcp_tools_enabled=True))
    run = execute(
        cli_type="claude",
        input_path=tmp_path / "in.md",
        output_path=output,
        schema=task_schema(),
        schema_kind="task",
        cwd=tmp_path,
        stop=threading.Event(),
        cli_conf={"binary_path": str(FAKES_BIN / "claude")},
        mcp=server,
    )
    in_the_way.rmdir()
    assert run.error.startswith("CLI could not be started: the MCP configuration: ")
    assert run.result is None  # never started


def test_stderr_message_prefers_json_error_and_drops_noise():
    assert stderr_message('YOLO mode is enabled.\n{"error": {"message": "quota"}}') == "quota"
    assert stderr_message("YOLO mode is enabled.\nboom", ("YOLO mode",)) == "boom"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [201, 5_000, 100_000])
@pytest.mark.parametrize("cli", ["claude", "gemini", "codex", "opencode"])
def test_deeply_nested_output_file_is_invalid_json_not_a_crash(tmp_path, cli, depth):
    out = tmp_path / "out.json"
    out.write_text('{"actions": ' + nested(depth) + "}")
    assert interpret(cli, result(), out).error == (
        "CLI output was not valid JSON: nested more than 200 levels deep"
    )
    out.write_text('{"actions": ' + nested(199) + "}")
    assert interpret(cli, result(), out).data == json.loads(out.read_text())


ERROR_EVENTS = {
    "claude": '{"type": "result", "is_error": true, "result": "boom", "deep": DEEP}',
    "gemini": '{"type": "error", "message": "boom", "deep": DEEP}',
    "codex": '{"type": "error", "message": "boom", "deep": DEEP}',
    "opencode": '{"type": "error", "error": {"name": "boom"}, "deep": DEEP}',
}


@pytest.mark.parametrize("cli", ERROR_EVENTS)
def test_deeply_nested_stream_lines_are_skipped(cli):
    parser = cli_for(cli).stream_parser()
    assert parse_line(parser, ERROR_EVENTS[cli].replace("DEEP", nested(100_000))) == []
    assert parse_line(parser, ERROR_EVENTS[cli].replace("DEEP", nested(201))) == []
    shallow = parse_line(parser, ERROR_EVENTS[cli].replace("DEEP", nested(150)))
    assert [item.text for item in shallow if isinstance(item, Trace)] == ["boom"]


def test_deeply_nested_stdout_and_stderr_are_read_as_text(tmp_path):
    deep = '{"type": "result", "is_error": true, "result": ' + nested(100_000) + "}"
    claude_ok = json.dumps({"type": "result", "is_error": False, "structured_output": {"a": 1}})
    assert CLIS["claude"].read_stdout(claude_ok + "\n" + deep).structured == {"a": 1}
    execution = interpret("claude", result(exit_code=1, stdout=deep, stderr=deep), tmp_path / "x")
    assert execution.error.endswith("]} (CLI exited with code 1)")
    assert stderr_message('{"error": ' + nested(100_000) + "}").startswith('{"error": [[[')


def test_retry_back_off_doubles_to_ten_minutes():
    assert [retry_delay(n).total_seconds() for n in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert retry_delay(20) == timedelta(minutes=10)


def _queued(task):
    return TaskQueueItem.objects.get(task=task, status=QueueStatus.QUEUED)


@pytest.mark.pg
def test_pickup_order(workspace):
    old = task_create(workspace=workspace, summary="old")
    new = task_create(workspace=workspace, summary="new")
    assert pickup.next_item(workspace.id).task_id == new.id  # LIFO
    finished = TaskQueueItem.objects.create(
        task=old, workspace=workspace, status=QueueStatus.COMPLETED
    )
    assert pickup.next_item(workspace.id).task_id == old.id  # most recently processed
    finished.delete()
    third = task_create(workspace=workspace, summary="third")
    task_prioritize_toggle(task=old)
    assert pickup.next_item(workspace.id).task_id == old.id  # priority first
    task_prioritize_toggle(task=old)
    TaskQueueItem.objects.filter(id=_queued(old).id).update(updated_at=timezone.now())
    assert pickup.next_item(workspace.id).task_id == old.id  # bumped by a comment
    assert third.id != old.id


@pytest.mark.pg
@pytest.mark.parametrize("status", ["in_review", "done"])
def test_pickup_skips_tasks_waiting_for_the_user(workspace, status):
    task = task_create(workspace=workspace, summary="t")
    Task.objects.filter(id=task.id).update(status=status)
    assert pickup.next_item(workspace.id) is None
    assert workspace.id not in pickup.workspaces_with_work()


@pytest.mark.pg
def test_pickup_waits_out_the_error_back_off(workspace):
    failing = task_create(workspace=workspace, summary="failing")
    Task.objects.filter(id=failing.id).update(
        failure_streak=1, retry_not_before=timezone.now() + timedelta(seconds=30)
    )
    assert pickup.next_item(workspace.id) is None
    other = task_create(workspace=workspace, summary="other")
    assert pickup.next_item(workspace.id).task_id == other.id


@pytest.mark.pg
def test_the_pickups_compiled_queries_take_each_calls_workspace_and_time(workspace, monkeypatch):
    """The pickup's queries are compiled once (core.compiled_queries): each call still asks
    about its own workspace and its own now (not the first call's)."""
    other_workspace = workspace_create(title="Other")
    waiting = task_create(workspace=workspace, summary="in back-off")
    retry_at = timezone.now() + timedelta(seconds=30)
    Task.objects.filter(id=waiting.id).update(failure_streak=1, retry_not_before=retry_at)
    other = task_create(workspace=other_workspace, summary="other")
    assert pickup.next_item(workspace.id) is None
    assert pickup.next_item(other_workspace.id).task_id == other.id
    assert pickup.workspaces_with_work() == {other_workspace.id: 1}
    later = retry_at + timedelta(seconds=1)
    monkeypatch.setattr(pickup.timezone, "now", lambda: later)
    assert pickup.next_item(workspace.id).task_id == waiting.id
    assert pickup.workspaces_with_work() == {workspace.id: 1, other_workspace.id: 1}


def test_a_compiled_query_refuses_a_value_its_sql_does_not_take_as_given():
    """A value the compiler rewrites (here into a LIKE pattern) has no stand-in to replace."""
    with pytest.raises(ValueError, match="cannot take"):
        compiled_rows(
            ("test", "icontains"),
            lambda title: Task.objects.filter(summary__icontains=title),
            title="x",
        )


@pytest.mark.pg
def test_compiled_models_are_what_the_queryset_gives_for_each_calls_values(
    workspace, django_assert_num_queries
):
    """compiled_models (the finish's "still wanted" read, the pass's begin and history, the
    pickup's next item): built once, it gives each call's own rows as the queryset does, with
    their converted fields and what they select_related (read with them, no query more)."""
    built = []

    def tasks_of(workspace_id):
        built.append(workspace_id)
        return Task.objects.select_related("workspace").filter(workspace_id=workspace_id)

    checks = [{"name": "tests", "command": "pytest -q", "timeout_minutes": 5}]
    other_workspace = workspace_create(title="Other", checks=checks)
    ours = task_create(workspace=workspace, summary="ours")
    theirs = task_create(workspace=other_workspace, summary="theirs")
    for workspace_id, task in ((workspace.id, ours), (other_workspace.id, theirs)):
        with django_assert_num_queries(1):
            [found] = compiled_models(("test_tasks_of",), tasks_of, workspace_id=workspace_id)
            assert found.workspace.title == task.workspace.title
        expected = Task.objects.get(id=task.id)
        assert [(f.name, getattr(found, f.attname)) for f in Task._meta.concrete_fields] == [
            (f.name, getattr(expected, f.attname)) for f in Task._meta.concrete_fields
        ]
        assert found.created_at.tzinfo is not None and not found._state.adding
        fields = Workspace._meta.concrete_fields  # (a JSON field among them)
        assert [getattr(found.workspace, f.attname) for f in fields] == [
            getattr(expected.workspace, f.attname) for f in fields
        ]
    assert len(built) == 1  # the second call used the first one's SQL


@pytest.mark.pg
def test_a_compiled_insert_writes_the_rows_bulk_create_writes(
    task, agents, django_assert_num_queries
):
    """core.compiled_queries.insert (a step's traces, the outbox's events, log rows): the same
    rows as bulk_create, its fields' defaults and conversions included (an aware datetime,
    JSON, a foreign key, auto_now_add), in batches the database takes, without ids read back."""
    run = AgentRun(
        workspace_id=task.workspace_id,
        task_id=task.id,
        agent_id=agents[0].id,
        agent_name="Planner",
        cli_type="claude",
        started_at=timezone.now(),
    )
    with django_assert_num_queries(1):
        insert([run])
    assert not run._state.adding
    when = timezone.now()

    def traces(kind: str, count: int) -> list:
        return [
            TraceEvent(
                run_id=run.id,
                seq=n,
                kind=kind,
                text=f"é {n}",
                detail={"n": [n, None]},
                created_at=when,
            )
            for n in range(count)
        ]

    many = 400  # 7 columns a row: over SQLite's 999 parameters, so in batches
    ours = traces("ours", many)
    insert(ours)
    TraceEvent.objects.bulk_create(traces("theirs", many))
    assert ours[0].id is None  # generated ids are not read back

    def rows(kind: str) -> list:
        fields = ("run_id", "seq", "action_kind", "text", "detail", "created_at")
        return list(TraceEvent.objects.filter(kind=kind).order_by("seq").values_list(*fields))

    assert rows("ours") == rows("theirs") and len(rows("ours")) == many
    saved = AgentRun.objects.get(id=run.id)
    assert (saved.started_at, saved.agent_name, saved.status) == (
        run.started_at,
        "Planner",
        run.status,
    )
    insert([OutboxEvent(type="task.updated", payload={"a": "ü"})])
    event = OutboxEvent.objects.latest("id")
    assert event.payload == {"a": "ü"} and event.created_at >= when  # auto_now_add


@pytest.mark.pg
def test_update_row_changes_what_the_querysets_update_changes(task, django_assert_num_queries):
    """core.compiled_queries.update_row (a status move, a workspace's last activity): one
    UPDATE by primary key, the fields' own conversions (an aware datetime, JSON, a choice),
    how many rows it changed; expressions are refused (their SQL is not a parameter)."""
    other = task_create(workspace=task.workspace, summary="other")
    when = timezone.now() - timedelta(days=3)
    changes = {"status": "in_review", "updated_at": when, "checks_result": {"tests": ["é", 1]}}
    with django_assert_num_queries(1):
        assert update_row(Task, task.id, **changes) == 1
    Task.objects.filter(id=other.id).update(**changes)
    fields = ("status", "updated_at", "checks_result")
    assert Task.objects.values_list(*fields).get(id=task.id) == (
        Task.objects.values_list(*fields).get(id=other.id)
    )
    assert Task.objects.get(id=task.id).updated_at == when
    assert update_row(Task, "no-such-task", status="done") == 0
    with pytest.raises(TypeError):
        update_row(Task, task.id, failure_streak=F("failure_streak") + 1)


@pytest.mark.django_db(transaction=True)
def test_a_compiled_locking_query_runs_only_inside_a_transaction():
    """As select_for_update() itself: outside a transaction it would lock nothing."""

    def locked(task_id):
        return Task.objects.select_for_update().filter(id=task_id)

    task = task_create(workspace=workspace_create(title="W"), summary="t")
    with transaction.atomic():
        assert [t.id for t in compiled_models(("test_locked",), locked, task_id=task.id)] == [
            task.id
        ]
    with pytest.raises(RuntimeError, match="inside a transaction"):
        compiled_models(("test_locked",), locked, task_id=task.id)


def test_the_history_a_pass_reads_knows_its_task(task, django_assert_num_queries):
    """task_history's rows come from a compiled query: each still knows its task, as
    `task.comments` would give it (a pass's input reads comment.task without a query)."""
    comment_create(task=task, content="hello", actor=USER)
    with django_assert_num_queries(2):
        comments, logs = task_selectors.task_history(task)
        assert [c.task.summary for c in comments] == [task.summary]
        assert {log.task.id for log in logs} == {task.id}


@pytest.mark.pg
def test_the_start_records_the_process_only_on_an_unstopped_item_of_its_worker(workspace):
    """record_process (its condition compiled once) writes the pid and where the pass goes
    on, to that item alone, and refuses a stopped item, another worker's, a finished one."""
    started = timezone.now()
    items = []
    for name in ("ours", "stopped", "theirs", "finished"):
        task = task_create(workspace=workspace, summary=name)
        item = TaskQueueItem.objects.queued().get(task=task)
        running = {"status": QueueStatus.IN_PROGRESS, "worker_id": "w1"}
        TaskQueueItem.objects.filter(id=item.id).update(**running)
        item.status, item.worker_id = running.values()
        items.append(item)
    ours, stopped, theirs, finished = items
    TaskQueueItem.objects.filter(id=stopped.id).update(stop_requested_at=started)
    TaskQueueItem.objects.filter(id=theirs.id).update(worker_id="w2")
    TaskQueueItem.objects.finish(finished, QueueStatus.COMPLETED)
    recorded = {
        item.id: TaskQueueItem.objects.record_process(
            item, pid=100 + n, pgid=200 + n, started_at=1.5, pass_started_at=started
        )
        for n, item in enumerate(items)
    }
    assert recorded == {ours.id: True, stopped.id: False, theirs.id: False, finished.id: False}
    rows = TaskQueueItem.objects.filter(id__in=[i.id for i in items])
    by_id = {r.id: (r.pid, r.pgid, r.process_started_at, r.pass_started_at) for r in rows}
    assert by_id.pop(ours.id) == (100, 200, 1.5, started)
    assert set(by_id.values()) == {(None, None, None, None)}


@pytest.mark.pg
def test_claim_is_atomic(workspace):
    task = task_create(workspace=workspace, summary="t")
    first = pickup.claim_next(workspace.id)
    assert first.task_id == task.id
    assert pickup.claim_next(workspace.id) is None
    assert TaskQueueItem.objects.get(id=first.id).status == QueueStatus.IN_PROGRESS


def test_the_input_file_carries_repeated_errors_once(workspace, agents):
    task = task_create(workspace=workspace, summary="Broken")
    comment_create(task=task, content="Go", actor=USER)
    for _ in range(50):
        fail_task(task, "CLI exited with code 1. 401")
    fail_task(task, "CLI could not be started: gone")
    task = Task.objects.select_related("workspace").get(id=task.id)
    text = task_input_text(task, agents[0], Path("/tmp/out.json"))
    block = text.split("## Comments")[1].split("```json\n")[1].split("\n```")[0]
    rows = [json.loads(line) for line in block.splitlines()]
    assert [(r["author"], r["content"], r.get("repeated")) for r in rows] == [
        ("User", "Go", None),
        ("System", "CLI exited with code 1. 401", 50),
        ("System", "CLI could not be started: gone", None),
    ]
    first, last = TaskComment.objects.filter(content__endswith="401").order_by("created_at")[::49]
    assert rows[1]["first_created_at"] == first.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert rows[1]["created_at"] == last.created_at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_pass_renders_each_input_row_once_and_again_only_when_it_changed(
    workspace, agents, monkeypatch
):
    # A long task's input is hundreds of rows: between two agents only the new or changed
    # ones are encoded again (the pass keeps the lines it rendered).
    task = task_create(workspace=workspace, summary="Long")
    comment_create(task=task, content="Go", actor=USER)
    fail_task(task, "CLI exited with code 1. 401")
    encoded = []
    encode = prompts._JSON.encode
    monkeypatch.setattr(prompts._JSON, "encode", lambda row: encoded.append(row) or encode(row))
    rendered = prompts.RenderedRows()

    def both() -> tuple[str, str, int]:
        """The input through the pass's rendered rows, from scratch, and the rows the first
        encoded."""
        current = Task.objects.select_related("workspace").get(id=task.id)
        out = Path("/tmp/out.json")
        encoded.clear()
        again = task_input_text(current, agents[0], out, rendered=rendered)
        encoded_again = len(encoded)
        return again, task_input_text(current, agents[0], out), encoded_again

    again, fresh, encoded_again = both()
    assert again == fresh and encoded_again == len(encoded) // 2 >= 4  # every row, once
    again, fresh, encoded_again = both()
    assert again == fresh and encoded_again == 0  # nothing new
    fail_task(task, "CLI exited with code 1. 401")  # the error's row changes: "repeated": 2
    comment_create(task=task, content="And tests", actor=USER)
    again, fresh, encoded_again = both()
    assert again == fresh and '"repeated": 2' in again and "And tests" in again
    # The changed error and the new comment, and the logs that came with them: not the rest.
    assert 2 <= encoded_again <= 4 < len(encoded) - encoded_again


def test_a_runs_events_all_name_the_run_and_where_it_runs(task, task_recorder):
    """Live trace batches, the stall warning and the final record carry the same identity, so
    open pages place each event on the right timeline."""
    recorder = task_recorder(stall_warn_seconds=0.001)
    recorder.on_line('{"type": "system", "subtype": "init", "model": "m"}')
    recorder.last_output -= 1  # silent for a second
    recorder.tick()
    recorder.finish(status="completed", exit_code=0)
    identity = {
        "workspace_id": task.workspace_id,
        "task_id": task.id,
        "chat_id": None,
        "agent_name": "Planner",
        "run_id": recorder.run.id,
    }
    events = list(OutboxEvent.objects.filter(type__startswith="run.").order_by("id"))
    assert [e.type for e in events] == ["run.trace", "run.stalled", "run.trace"]
    for event in events:
        assert {key: event.payload[key] for key in identity} == identity
    assert events[1].payload["silent_seconds"] == 1
    assert [e.payload["status"] for e in events[::2]] == ["running", "completed"]


def test_a_flooding_cli_keeps_the_recorders_backlog_bounded(task_recorder, monkeypatch):
    """Lines wait on the reader thread until the run thread flushes: banners are never queued
    and a flood of events beyond the backlog limit is dropped, so 100 MB of output costs no
    more memory than the limit."""
    import runner.recorder

    monkeypatch.setattr(runner.recorder, "BACKLOG_CHARS", 1000)
    recorder = task_recorder()
    for _ in range(100):
        recorder.on_line("x" * 1023)
    assert not recorder.lines
    event = '{"type": "system", "subtype": "init", "model": "m"}'
    for _ in range(100):
        recorder.on_line(event)
    assert len(recorder.lines) == 1000 // len(event)
    recorder.tick()
    recorder.on_line(event)
    assert len(recorder.lines) == 1  # a flush makes room again


# --- the worker's C heap -----------------------------------------------------------------

# A fresh process: (bare) or after creating the worker (worker), THREADS threads allocate at
# once, as a busy worker's run and pipe-reading threads do; prints glibc's malloc arena count.
ARENAS_SCRIPT = """
import ctypes, ctypes.util, os, sys, tempfile, threading
import django
django.setup()
from worker.loop import Worker
if sys.argv[1] == "worker":
    Worker(poll_interval=1)
barrier = threading.Barrier(THREADS)
def allocate():
    blocks = [bytearray(64 * 1024) for _ in range(4)]  # malloc'd: above pymalloc's 512 bytes
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.fopen.restype = ctypes.c_void_p
libc.malloc_info.argtypes = (ctypes.c_int, ctypes.c_void_p)
libc.fclose.argtypes = (ctypes.c_void_p,)
path = os.path.join(tempfile.mkdtemp(), "malloc.xml")
stream = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, stream)
libc.fclose(stream)
print(open(path).read().count("<heap nr="))
"""


def _arenas(mode: str, threads: int) -> int:
    script = ARENAS_SCRIPT.replace("THREADS", str(threads))
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script, mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc arenas")
def test_the_worker_process_keeps_two_malloc_arenas_however_many_threads_allocate():
    # Without the cap each thread allocating beside the others gets an arena of its own, and
    # its freed pages stay: the worker grew ~20 MB over 10,000 steps in 10 workspaces.
    assert _arenas("bare", threads=8) > 2  # the control: glibc's default behaviour
    assert _arenas("worker", threads=8) <= 2


# Four run threads each allocate 32 MB in malloc'd blocks, free half while the rest is live
# (fragments), and end; then (release) the worker's end-of-thread call. Prints the growth of
# the process's anonymous memory (its heap: pages of its files read in meanwhile do not count),
# once the threads are gone from the system too (a thread's last frees come after join()).
RELEASE_SCRIPT = """
import os, sys, threading, time
from worker.malloc import limit_malloc_arenas, release_free_memory
limit_malloc_arenas()
def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
base = rss_mb()
barrier = threading.Barrier(4)
kept = []  # what the threads allocated last and the process still holds (see below)
def run():
    blocks = [bytearray(64 * 1024) for _ in range(512)]
    barrier.wait()
    # Allocated after every block of every thread, so above them in each arena's heap, and
    # kept alive: glibc cannot give back the blocks freed below it by itself (its arenas shrink
    # from the top only), whichever thread shares which arena; malloc_trim can. Without it,
    # whether glibc kept them depended on the threads' timing (the suite saw both ways).
    kept.append(bytearray(4096))
    barrier.wait()
    del blocks[::2]
    barrier.wait()
threads = [threading.Thread(target=run) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
while len(os.listdir("/proc/self/task")) > 1:
    time.sleep(0.01)
if sys.argv[1] == "release":
    release_free_memory()
print(rss_mb() - base)
# What holds the memory, for a failure's message: the largest anonymous mappings and malloc's
# own account (mallinfo2: in its arenas, in mmapped blocks, free in them).
regions, current = [], None
for line in open("/proc/self/smaps"):
    if line[0] in "0123456789abcdef" and " " in line and "-" in line.split()[0]:
        current = line.split()
    elif line.startswith("Anonymous:") and current:
        regions.append((int(line.split()[1]), current[0], " ".join(current[5:])))
for kb, span, name in sorted(regions, reverse=True)[:4]:
    print(f"{kb} kB anonymous {span} {name}", file=sys.stderr)
try:
    import ctypes
    names = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"
    class Info(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in names.split()]
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = Info
    i = libc.mallinfo2()
    print("malloc:", i.arena, "in arenas,", i.hblkhd, "mmapped,", i.uordblks, "in use,",
          i.fordblks, "free", file=sys.stderr)
except (AttributeError, OSError):
    pass
"""


def _grown_mb(mode: str) -> tuple[float, str]:
    done = subprocess.run(
        [sys.executable, "-c", RELEASE_SCRIPT, mode],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return float(done.stdout.split()[-1]), done.stderr


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc_trim")
def test_memory_a_run_thread_freed_goes_back_to_the_system_when_it_ends():
    grown, held = _grown_mb("keep")
    assert grown > 4, held  # the control: glibc keeps what the threads freed
    grown, held = _grown_mb("release")
    assert grown < 2, held  # (once 8.4 MB in a whole suite's run: what held it is said here)


def test_private_files_are_rewritten_to_their_new_length_and_never_through_a_symlink(tmp_path):
    path = tmp_path / "input.md"
    write_private(path, "a long first version ✓" * 100)
    write_private(path, "short ✓")
    assert path.read_text(encoding="utf-8") == "short ✓"
    assert path.stat().st_mode & 0o777 == 0o600
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    with pytest.raises(OSError):
        write_private(link, "through the link")
    assert target.read_text() == "keep"


def test_a_removed_temp_dir_is_made_again_for_the_next_input(tmp_path, settings):
    settings.CONFIG = dataclasses.replace(settings.CONFIG, temp_dir=tmp_path / "malamar")
    first = task_input_path("t1")
    write_private(first, "one")
    shutil.rmtree(tmp_path / "malamar")  # e.g. a temp cleaner, while the worker runs
    write_private(task_input_path("t1"), "two")
    assert first.read_text() == "two"


@pytest.mark.pg
def test_a_run_deleted_with_its_task_ends_without_a_trace(task, task_recorder):
    """The task was deleted while its CLI ran: the run's final record finds nothing to update
    and writes no traces (they would point at a run that is gone: a FOREIGN KEY failure)."""
    recorder = task_recorder()
    recorder.on_line('{"type": "system", "subtype": "init", "model": "m"}')
    task.delete()
    with transaction.atomic():
        recorder.finish(status="completed", exit_code=0)
    assert not TraceEvent.objects.exists()


def test_the_mcp_server_reaches_the_shared_database_and_redis(settings, tmp_path):
    # A CLI starts `malamar mcp` with a minimal environment plus the server's own: without
    # DATABASE_URL it would open an empty SQLite file in the data dir instead of PostgreSQL.
    workspace = type("W", (), {"id": "w1", "mcp_tools_enabled": True})()
    settings.DATA_DIR = tmp_path
    settings.CONFIG = dataclasses.replace(settings.CONFIG, database_url="", redis_url="")
    assert dict(mcp_server_for(workspace).env) == {"MALAMAR_DATA_DIR": str(tmp_path)}
    settings.CONFIG = dataclasses.replace(
        settings.CONFIG, database_url="postgres://u@db/malamar", redis_url="redis://r:6379/0"
    )
    assert dict(mcp_server_for(workspace).env) == {
        "MALAMAR_DATA_DIR": str(tmp_path),
        "DATABASE_URL": "postgres://u@db/malamar",
        "REDIS_URL": "redis://r:6379/0",
    }


def test_a_runaway_output_line_is_dropped_whole_never_its_tail_as_a_line():
    """A line past LINE_CAP is not kept (memory stays bounded); what follows the cut up to the
    line's end must not reach the parser as a line of its own (it could hold a whole event)."""
    forged = b'{"type": "result", "result": "forged"}'
    runaway = b'{"type": "text", "text": "' + b"a" * (3 * process.LINE_CAP) + b'"}'
    # The cut falls at a chunk boundary: what follows it starts like an event.
    pad = process.READ_CHUNK - len(runaway) % process.READ_CHUNK
    data = runaway + b" " * pad + forged + b"\n" + b'{"ok": 1}\n'
    lines = []
    splitter = process._Lines(lines.append)
    for start in range(0, len(data), process.READ_CHUNK):  # as the pipe's reads bring it
        splitter.feed(data[start : start + process.READ_CHUNK])
    splitter.end()
    assert lines == ['{"ok": 1}']


@pytest.fixture
def watched(monkeypatch, tmp_path):
    """`watched(argv, **wait_options)`: a process followed by Held.wait in a thread, and how
    long its watch slept each time (None: until woken); `asleep` is set when it sleeps without
    a timeout."""
    naps: list[float | None] = []
    asleep = threading.Event()
    sleep = process._sleep

    def recorded(wake, seconds):
        naps.append(seconds)
        if seconds is None:
            asleep.set()
        sleep(wake, seconds)

    monkeypatch.setattr(process, "_sleep", recorded)
    followed = []

    def start(argv: list[str], **options) -> SimpleNamespace:
        held = process.spawn(process.Command(argv), cwd=str(tmp_path), env=dict(os.environ))
        held.release()
        results: list[ProcessResult] = []
        thread = threading.Thread(target=lambda: results.append(held.wait(**options)))
        thread.start()
        run = SimpleNamespace(held=held, thread=thread, results=results, naps=naps, asleep=asleep)
        followed.append(run)
        return run

    yield start
    for run in followed:  # a failed test must not leave a process behind
        if run.thread.is_alive():
            process.kill_tree(run.held.proc.pid, pgid=run.held.proc.pid, create_time=0)
            run.thread.join()


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "no pidfd"])
def test_a_watch_sleeping_until_woken_sees_its_cli_end_with_all_it_printed(
    watched, monkeypatch, tmp_path, pidfd
):
    """The watch's one select() wakes at the CLI's exit, by its pidfd or (where there is none,
    as on macOS) by the thread that waits for it; the output read before is all there, its
    lines in order."""
    if not pidfd:
        monkeypatch.setattr(process, "_pidfd", lambda pid: None)
    lines: list[str] = []
    asleep_after_output: list[threading.Event] = []

    def on_line(line: str) -> None:  # (on the watch's thread, before it sleeps again)
        if line == "line299":
            asleep_after_output[0].clear()  # its next sleep until woken is after the output
        lines.append(line)

    start, go = tmp_path / "start", tmp_path / "go"
    script = (
        f"until [ -e {start} ]; do sleep 0.05; done; echo oops >&2; "
        "i=0; while [ $i -lt 300 ]; do echo line$i; i=$((i+1)); done; "
        f"exec >/dev/null 2>&1; until [ -e {go} ]; do sleep 0.05; done; exit 3"
    )
    run = watched(["sh", "-c", script], stop=process.RunStop(), on_line=on_line)
    asleep_after_output.append(run.asleep)
    start.touch()
    wait_until(
        lambda: len(lines) == 300 and run.asleep.is_set(), timeout=60, what="output, then a sleep"
    )
    go.touch()  # the CLI ends now, its output closed before, while its watch sleeps until woken
    run.thread.join(timeout=60)
    result = run.results[0]
    assert lines == [f"line{n}" for n in range(300)]
    assert (result.exit_code, result.stderr, result.stopped) == (3, "oops\n", False)


def test_a_quiet_runs_watch_sleeps_until_its_stop_wakes_it(watched):
    """A hundred quiet agents cost no polling: the watch of a CLI that prints nothing sleeps
    without a timeout, and its RunStop wakes it to kill the CLI."""
    stop = process.RunStop()
    ticks = []
    run = watched(
        ["sleep", "600"],
        stop=stop,
        on_tick=lambda: ticks.append(1) and False,
        tick_due=lambda: None,
    )
    assert run.asleep.wait(timeout=60), f"the watch never slept until woken: {run.naps[:5]}"
    stop.set()
    run.thread.join(timeout=60)
    assert run.results and run.results[0].stopped
    assert run.naps == [None] and ticks == [1]


def test_output_wakes_a_quiet_runs_watch(watched, tmp_path):
    """The first line after a silence is looked at at once (trace batches, a CLI saying it
    waits out a limit), though the watch slept without a timeout."""
    stop, lines, looked_after_output = process.RunStop(), [], threading.Event()
    go = tmp_path / "go"

    def tick() -> bool:
        if lines:
            looked_after_output.set()
        return False

    run = watched(
        ["sh", "-c", f"until [ -e {go} ]; do sleep 0.05; done; echo hello; exec sleep 600"],
        stop=stop,
        on_line=lines.append,
        on_tick=tick,
        tick_due=lambda: None,
    )
    assert run.asleep.wait(timeout=60)
    go.touch()  # the CLI prints now, while its watch sleeps until woken
    assert looked_after_output.wait(timeout=60), f"output did not wake the watch: {run.naps}"
    stop.set()
    run.thread.join(timeout=60)
    assert run.results[0].stopped and lines == ["hello"]


def test_a_runs_stall_and_trace_deadlines_tell_its_watch_when_to_look(task_recorder):
    recorder = task_recorder(stall_warn_seconds=900, stall_kill_seconds=1200)
    recorder.last_output -= 300  # silent for five minutes
    assert 599 < recorder.tick_due() <= 600  # the warning, in ten minutes
    recorder.warned = True
    assert 899 < recorder.tick_due() <= 900  # then the kill
    recorder.on_line('{"type": "system", "subtype": "init", "model": "m"}')
    assert recorder.tick_due() <= 0.25  # a trace batch waits at most a flush interval
    quiet = task_recorder(stall_warn_seconds=0, stall_kill_seconds=0)
    assert quiet.tick_due() is None  # nothing to do until the CLI prints


def test_a_recorder_made_ahead_counts_its_runs_silence_from_its_start(task_recorder):
    # (the pipeline makes the next run's recorder while the run before works)
    recorder = task_recorder(stall_warn_seconds=900, deferred=True)
    recorder.last_output -= 600  # made ten minutes before its CLI ran
    with transaction.atomic():
        recorder.start_writes()
    assert 899 < recorder.tick_due() <= 900


def test_a_stalled_run_is_killed_by_its_watch(watched, task_recorder):
    recorder = task_recorder(stall_warn_seconds=0, stall_kill_seconds=60)
    recorder.last_output -= 61  # silent longer than the kill limit
    run = watched(
        ["sleep", "600"], stop=process.RunStop(), on_tick=recorder.tick, tick_due=recorder.tick_due
    )
    run.thread.join(timeout=60)
    assert run.results[0].stalled and recorder.killed_for_silence


def test_a_held_process_runs_nothing_before_its_go_then_becomes_the_cli(tmp_path):
    """The gate is the process recorded before anything runs: until its go it has not run
    the command; then it becomes the command (same pid) in its folder, with its environment
    and /dev/null as stdin, or with the input it was given (nothing of the go in it)."""
    ran = tmp_path / "ran"
    script = f'touch {ran}; pwd; echo "$WHO"; cat; echo "read: $?"'
    held = process.spawn(
        process.Command(["sh", "-c", script]), cwd=str(tmp_path), env={**os.environ, "WHO": "me"}
    )
    assert psutil.Process(held.started.pid).status() != psutil.STATUS_ZOMBIE
    assert not ran.exists(), "the command ran before its go"
    held.release()
    result = held.wait()
    assert result.stdout.splitlines() == [str(tmp_path), "me", "read: 0"]
    assert ran.exists()
    fed = process.spawn(process.Command(["cat"], stdin=b"line one\nline two"), cwd="/", env={})
    fed.release()
    assert fed.wait().stdout == "line one\nline two"


@pytest.mark.parametrize(
    ("script", "exit_code"), [("echo out; exit 3", 3), ("echo out; kill -9 $$", -9)]
)
def test_a_process_ended_later_tells_its_exit_and_is_reaped_by_its_end(tmp_path, script, exit_code):
    """wait(end_later=True) says how the process ended without reaping it (the kernel frees a
    process as it is reaped: off the path to an agent's next CLI); end() reaps it and closes
    its pipes."""
    held = process.spawn(process.Command(["sh", "-c", script]), cwd=str(tmp_path), env={})
    held.release()
    result = held.wait(end_later=True)
    assert (result.exit_code, result.stdout) == (exit_code, "out\n")
    assert psutil.Process(held.started.pid).status() == psutil.STATUS_ZOMBIE  # not reaped yet
    assert not held.proc.stdout.closed
    held.end()
    assert not psutil.pid_exists(held.started.pid) or (
        psutil.Process(held.started.pid).status() != psutil.STATUS_ZOMBIE  # (a pid reused)
    )
    assert held.proc.returncode == exit_code and held.proc.stdout.closed
    held.end()  # (once is enough: a second does nothing)


def test_a_held_process_nobody_releases_exits_without_running(tmp_path):
    ran = tmp_path / "ran"
    held = process.spawn(process.Command(["touch", str(ran)]), cwd=str(tmp_path), env={})
    held.cancel()
    assert held.proc.returncode == process.GATE_EXITED
    assert not ran.exists()


def _printing_everything(tmp_path) -> tuple[process.Command, dict]:
    """A command that prints its folder, its whole environment, its arguments and its input."""
    script = 'pwd; env | sort; printf "<%s>" "$@"; echo; cat'
    args = ["it's\na 'quoted'\n", "", "$HOME `x`", "-n", "back\\slash"]
    env = {"PATH": os.environ["PATH"], "PWD": str(tmp_path), "WHO": "me", "ODD": "a'b\n$c"}
    return process.Command(["sh", "-c", script, "sh", *args], stdin=b"in\nput"), env


def _output(held) -> str:
    held.release()
    result = held.wait()
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_a_gate_started_ahead_runs_the_command_exactly_as_a_new_gate_does(tmp_path):
    """The next run's gate is started while a run works, before its command is known (its
    folder, arguments and input come with the go): the command sees the same folder, PWD,
    environment (no OLDPWD of the gate's own cd), arguments and input either way."""
    process.spares.clear()
    command, env = _printing_everything(tmp_path)
    fresh = _output(process.spawn(command, cwd=str(tmp_path), env=env))
    process.spares.add({**env, "PWD": "/elsewhere"})  # PWD is the run's: it comes with the go
    [spare] = process.spares.waiting()
    held = process.spawn(command, cwd=str(tmp_path), env=env, spare=True)
    assert held.started.pid == spare and process.spares.waiting() == []
    assert _output(held) == fresh
    lines = fresh.splitlines()
    assert lines[0] == str(tmp_path) and {"ODD=a'b", "WHO=me", f"PWD={tmp_path}"} <= set(lines)
    assert "OLDPWD" not in fresh
    assert fresh.endswith("<it's\na 'quoted'\n><><$HOME `x`><-n><back\\slash>\nin\nput")


def test_a_go_without_input_is_read_as_a_file_or_as_a_line_where_that_cannot_be(
    tmp_path, monkeypatch
):
    """A command without input: after an empty line (process.GO_AS_A_FILE) the gate sources
    the go from its standard input in one read; where that path cannot be opened, it reads the
    line as before. Either way the command runs exactly as given, with /dev/null as its input."""
    command, env = _printing_everything(tmp_path)
    command = process.Command(command.argv)  # no input
    as_a_file = _output(process.spawn(command, cwd=str(tmp_path), env=env))
    missing = process.GATE.replace("/dev/stdin", str(tmp_path / "missing"))
    monkeypatch.setattr(process, "GATE", missing)
    as_a_line = _output(process.spawn(command, cwd=str(tmp_path), env=env))
    assert as_a_file == as_a_line
    assert as_a_file.endswith("<it's\na 'quoted'\n><><$HOME `x`><-n><back\\slash>\n")


def test_a_spare_gate_is_taken_only_for_its_environment_and_ends_unused(tmp_path):
    process.spares.clear()
    ran = tmp_path / "ran"
    env = {"PATH": os.environ["PATH"], "WHO": "me"}
    process.spares.add(env)
    [spare] = process.spares.waiting()
    held = process.spawn(
        process.Command(["touch", str(ran)]), cwd=str(tmp_path), env={**env, "WHO": "you"}
    )
    assert held.started.pid != spare and process.spares.waiting() == [spare]
    held.cancel()
    gate = psutil.Process(spare)
    process.spares.clear()  # the worker stops: the gate gets no go and exits
    assert process.spares.waiting() == []
    assert not gate.is_running() or gate.status() == psutil.STATUS_ZOMBIE
    assert not ran.exists()


def test_an_agent_run_asks_for_the_next_runs_gate_once_its_cli_runs(tmp_path):
    process.spares.clear()
    env = {"PATH": os.environ["PATH"]}
    held = process.spawn(process.Command(["true"]), cwd=str(tmp_path), env=env, spare=True)
    assert process.spares.waiting() == []
    held.release()
    next_run = process.spawn(process.Command(["true"]), cwd=str(tmp_path), env=env, spare=True)
    held.wait()
    assert next_run.started.pid != held.started.pid
    assert _output(next_run) == ""
    process.spares.clear()


@pytest.mark.parametrize(
    ("taken_away", "error"),
    [("unlink", "No such file or directory: {}"), ("chmod", "Permission denied: {}")],
)
def test_a_program_taken_away_between_its_check_and_its_go_is_a_start_error(
    tmp_path, taken_away, error
):
    """Checked when forked, gone (or no longer executable) when the gate execs it: a start
    error in Popen's words, not the gate shell's complaint as the CLI's failure."""
    program = tmp_path / "cli"
    program.write_text("#!/bin/sh\necho ran\n")
    program.chmod(0o755)
    held = process.spawn(process.Command([str(program)]), cwd=str(tmp_path), env={})
    assert held.start_error is None
    program.unlink() if taken_away == "unlink" else program.chmod(0o644)
    held.release()
    result = held.wait()
    assert (result.start_error, result.stdout) == (error.format(program), "")


def test_a_cli_that_prints_like_the_gate_is_not_taken_for_a_start_error(tmp_path):
    """Only the gate's words about the command's own program are a start error."""
    program = tmp_path / "cli"
    program.write_text("#!/bin/sh\necho 'malamar-gate: 1: exec: x: not found' >&2\nexit 127\n")
    program.chmod(0o755)
    held = process.spawn(process.Command([str(program), "a"]), cwd=str(tmp_path), env={})
    held.release()
    assert (held.wait().start_error, held.result.exit_code) == (None, 127)


@pytest.mark.parametrize(
    ("program", "error"),
    [
        ("/nonexistent/cli", "No such file or directory: /nonexistent/cli"),
        ("no-such-cli-anywhere", "No such file or directory: no-such-cli-anywhere"),
        ("./plain.txt", "Permission denied: ./plain.txt"),
        ("./folder", "Permission denied: ./folder"),
        # executable, but neither a script ("#!") nor a binary: the gate's sh would run it as
        # a shell script; Popen said "Exec format error"
        ("./no-shebang", "Exec format error: ./no-shebang"),
    ],
)
def test_a_program_that_cannot_be_executed_is_a_start_error_and_nothing_starts(
    tmp_path, program, error
):
    """As execvpe would say it, before anything is started (the gate cannot report it)."""
    (tmp_path / "plain.txt").write_text("not a program")
    (tmp_path / "folder").mkdir()
    no_shebang = tmp_path / "no-shebang"
    no_shebang.write_text(f"touch {tmp_path / 'ran'}\n")
    no_shebang.chmod(0o755)
    held = process.spawn(
        process.Command([program]), cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"}
    )
    assert (held.start_error, held.proc, held.started) == (error, None, None)
    held.release()
    assert held.wait().start_error == error
    assert not (tmp_path / "ran").exists()


# PostgreSQL keeps the claim and the begin apart (worker.pickup._begin says why).
SQLITE_CLAIM = pytest.mark.skipif(ON_POSTGRES, reason="SQLite: the claim begins the pass")


@postgres_only("PostgreSQL: the claim and the pass's begin are two transactions")
def test_a_claim_on_postgresql_leaves_the_begin_to_the_pass(workspace):
    task = task_create(workspace=workspace, summary="t")
    item = pickup.claim_next(workspace.id)
    assert Task.objects.get(id=task.id).status == TaskStatus.TODO
    assert not hasattr(item, "pass_begun")


@SQLITE_CLAIM
def test_a_claim_begins_its_pass_in_the_same_transaction(workspace):
    """SQLite: the claim and the pass's begin are one write transaction (the task is In
    Progress when the claim returns; the pass does not begin again)."""
    task = task_create(workspace=workspace, summary="t")
    with transaction.atomic():  # (inside the claim's transaction, as TaskPass.run would see it)
        item = pickup.claim_next(workspace.id)
        assert Task.objects.get(id=task.id).status == TaskStatus.IN_PROGRESS
    begun_task, moved = item.pass_begun
    assert begun_task.id == task.id and moved


@SQLITE_CLAIM
def test_a_claim_another_worker_won_begins_nothing(workspace, monkeypatch):
    task = task_create(workspace=workspace, summary="t")
    item = pickup.next_item(workspace.id)
    assert TaskQueueItem.objects.claim(item.id, worker_id=None)  # taken meanwhile
    monkeypatch.setattr(pickup, "next_item", lambda workspace_id: item)
    assert pickup.claim_next(workspace.id) is None
    assert Task.objects.get(id=task.id).status == TaskStatus.TODO
    assert not hasattr(item, "pass_begun")


@SQLITE_CLAIM
def test_a_begin_that_fails_keeps_the_claim_and_the_pass_begins_it_again(workspace, monkeypatch):
    task = task_create(workspace=workspace, summary="t")

    def broken(*, task, **_kwargs):  # the begin's move fails after a write
        Task.objects.filter(id=task.id).update(summary="written, then rolled back")
        raise RuntimeError("boom")

    monkeypatch.setattr(task_services, "task_status_set", broken)
    item = pickup.claim_next(workspace.id)
    assert TaskQueueItem.objects.get(id=item.id).status == QueueStatus.IN_PROGRESS
    assert Task.objects.get(id=task.id).summary == "t"
    assert not hasattr(item, "pass_begun")  # TaskPass.run calls task_pass_begin itself


@pytest.mark.pg
def test_the_task_claim_keeps_its_rules_and_is_built_once(workspace, monkeypatch):
    """The claim's UPDATE is compiled once (built at every pickup it cost ~1.3 ms) and still
    claims only a queued item, for a worker nobody took over."""
    built = []
    queryset = type(TaskQueueItem.objects.all())
    claimable = queryset.claimable
    monkeypatch.setattr(
        queryset, "claimable", lambda self, *args: built.append(args) or claimable(self, *args)
    )
    live = worker_register(hostname="h", pid=1, capacity=0, clis=[], version="v")
    gone = worker_register(hostname="h", pid=2, capacity=0, clis=[], version="v")
    WorkerRow.objects.filter(id=gone.id).update(taken_over_at=timezone.now())
    items = [
        TaskQueueItem.objects.get(task=task_create(workspace=workspace, summary=name))
        for name in ("a", "b")
    ]
    assert not TaskQueueItem.objects.claim(items[0].id, worker_id=gone.id)
    assert TaskQueueItem.objects.claim(items[0].id, worker_id=live.id)
    assert not TaskQueueItem.objects.claim(items[0].id, worker_id=live.id)  # claimed already
    assert TaskQueueItem.objects.claim(items[1].id)  # (no worker: one shape more)
    assert TaskQueueItem.objects.get(id=items[0].id).worker_id == live.id
    assert TaskQueueItem.objects.get(id=items[1].id).status == QueueStatus.IN_PROGRESS
    assert len(built) <= 2  # once per shape, whichever built first in this process


# --- the answer file (runner.files.read_output) ---------------------------------------------


def test_an_answer_file_is_read_whole_up_to_its_cap_and_refused_past_it(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "OUTPUT_READ_CAP", 10)
    path = tmp_path / "answer.json"
    path.write_bytes(b"0123456789")
    assert files.read_output(path) == "0123456789"  # (at the cap)
    path.write_bytes(b"0123456789X")
    with pytest.raises(ValueError, match="larger than"):
        files.read_output(path)
    assert files.read_output(tmp_path / "missing.json") is None
    assert files.read_output(tmp_path) is None  # (a folder where the file should be)


def test_an_answer_file_that_grew_after_its_size_was_read_is_read_to_its_end(tmp_path, monkeypatch):
    path = tmp_path / "answer.json"
    text = '{"actions": [' + ", ".join(['{"type": "skip"}'] * 5000) + "]}"
    path.write_text(text)
    # (what fstat said before the CLI's last write: 3 bytes)
    monkeypatch.setattr(files.os, "fstat", lambda fd: SimpleNamespace(st_size=3))
    assert files.read_output(path) == text
