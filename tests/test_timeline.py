"""Agent run timelines: traces grouped for reading, the selector, the run fragment, and the
final event that collapses a finished run."""

import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.template import Context, Template
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.models import OutboxEvent
from runner.models import AgentRun, TraceEvent
from runner.selectors import TIMELINE_RUNS, run_timelines
from runner.timeline import group_traces
from tests.htmltree import parse


def t(kind, text="", action_kind="", **detail):
    return SimpleNamespace(kind=kind, action_kind=action_kind, text=text, detail=detail, seq=0)


def test_a_command_and_its_result_become_one_entry():
    groups = group_traces(
        [
            t("action", "Running `pytest`", "command", command="pytest -q", cwd="/repo"),
            t(
                "action",
                "Command failed (exit 1)",
                "command-result",
                exit_code=1,
                output="1 failed",
            ),
        ]
    )
    assert len(groups) == 1
    command = groups[0]
    assert (command.kind, command.command, command.cwd) == ("command", "pytest -q", "/repo")
    assert command.finished and command.failed and command.exit_code == 1
    assert command.output == "1 failed"


def test_a_running_command_is_unfinished_and_a_lone_result_still_shows():
    groups = group_traces(
        [
            t("action", "Command finished (exit 0)", "command-result", exit_code=0, output="ok"),
            t("action", "Running `make`", "command", command="make"),
        ]
    )
    assert [g.kind for g in groups] == ["command", "command"]
    assert groups[0].finished and not groups[0].failed
    assert not groups[1].finished


def test_reads_and_searches_group_as_exploration_and_edits_as_changes():
    groups = group_traces(
        [
            t("action", "Reading a.py", "file-read"),
            t("action", "Searching TODO", "search"),
            t("action", "Reading b.py", "file-read"),
            t("action", "Editing a.py", "file-edit"),
            t("action", "Writing c.py", "file-create"),
            t("action", "Editing a.py", "file-edit"),
            t("action", "Reading d.py", "file-read"),
        ]
    )
    assert [g.kind for g in groups] == ["explore", "edit", "explore"]
    assert groups[0].text == "Explored: read 2 files, 1 search"
    assert len(groups[0].items) == 3
    assert groups[1].text == "Changed 2 files"
    assert groups[2].text == "Explored: read 1 file"


def test_a_plan_is_a_checklist_and_statuses_keep_the_latest():
    groups = group_traces(
        [
            t("status", "Session started"),
            t("status", "Reconnecting… 1/5"),
            t("plan", "[x] Read the code\n[ ] Write tests"),
            t("thought", "x" * 2000),
        ]
    )
    assert [g.kind for g in groups] == ["status", "plan", "thought"]
    assert groups[0].text == "Reconnecting… 1/5"
    assert groups[1].items == [
        {"done": True, "text": "Read the code"},
        {"done": False, "text": "Write tests"},
    ]
    assert len(groups[2].text) < 700 and groups[2].text.endswith("…")


def _run(workspace, task, *, status="completed", traces=(), minutes_ago=0, **fields):
    started = timezone.now() - timedelta(minutes=minutes_ago)
    run = AgentRun.objects.create(
        id=f"run{AgentRun.objects.count():04d}",
        workspace=workspace,
        task=task,
        agent_name="Planner",
        cli_type="claude",
        status=status,
        started_at=started,
        ended_at=None if status == "running" else started + timedelta(seconds=72),
        trace_count=len(traces),
        **fields,
    )
    TraceEvent.objects.bulk_create(
        TraceEvent(run=run, seq=i + 1, kind=k, action_kind=a, text=x, created_at=started)
        for i, (k, a, x) in enumerate(traces)
    )
    return run


def test_run_timelines_take_two_queries_whatever_the_number_of_runs(db, workspace, task):
    trace = [("action", "file-read", "Reading a.py")]
    _run(workspace, task, traces=trace)
    with CaptureQueriesContext(connection) as few:
        list(run_timelines(task=task))
    for minutes in range(10):
        _run(workspace, task, traces=trace * 5, minutes_ago=minutes)
    with CaptureQueriesContext(connection) as many:
        runs = run_timelines(task=task)
    assert len(few) == len(many) == 2
    assert len(runs) == 11 and runs.task_id == task.id and runs.chat_id is None
    assert runs[-1].started_at >= runs[0].started_at  # oldest first
    assert all(run.groups[0].kind == "explore" for run in runs)


def test_only_the_latest_runs_are_shown_and_running_only_filters(db, workspace, task):
    for minutes in range(TIMELINE_RUNS + 3):
        _run(workspace, task, minutes_ago=minutes + 1)
    live = _run(workspace, task, status="running")
    runs = run_timelines(task=task)
    assert len(runs) == TIMELINE_RUNS and runs.hidden == 4
    running = run_timelines(task=task, running_only=True)
    assert [run.id for run in running] == [live.id] and running[0].is_running


def test_the_timeline_renders_grouped_runs_with_usage_and_live_hooks(db, workspace, task):
    traces = [
        ("action", "command", "Running `pytest`"),
        ("action", "command-result", "Command finished (exit 0)"),
        ("plan", "", "[x] Plan it\n[ ] Build it"),
    ]
    done = _run(workspace, task, traces=traces, input_tokens=12345, output_tokens=900, cost_usd=0.5)
    live = _run(workspace, task, status="running", current_action="Editing app/models.py")
    html = Template('{% include "components/run_timeline.html" with runs=runs %}').render(
        Context({"runs": run_timelines(task=task)})
    )
    assert f'data-runs-task="{task.id}"' in html
    assert f'data-run-id="{done.id}"' in html and f'data-last-seq="{len(traces)}"' in html
    assert "12.3k in · 900 out" in html and "$0.50" in html and "1m 12s" in html
    assert "Plan it" in html and "is-done" in html
    assert f'data-run-live="{live.id}"' in html and f'data-run-current="{live.id}"' in html
    assert "Editing app/models.py" in html
    # finished runs are collapsed, the running one is open
    assert f'id="run-{done.id}" data-run-id="{done.id}" data-run-status="completed"' in html
    opened = html.split(f'id="run-{live.id}"')[1].split(">")[0]
    assert " open" in opened


def test_agent_text_in_traces_is_escaped(db, workspace, task):
    _run(workspace, task, traces=[("text", "", "<script>alert(1)</script>")])
    html = Template('{% include "components/run_timeline.html" with runs=runs %}').render(
        Context({"runs": run_timelines(task=task)})
    )
    assert "<script>alert(1)" not in html and "&lt;script&gt;" in html


def test_run_fragment_view(client, db, workspace, task):
    run = _run(workspace, task, traces=[("action", "file-edit", "Editing a.py")])
    response = client.get(f"/runs/{run.id}/")
    assert response.status_code == 200
    edit = parse(response.content.decode()).find("trace--edit", tag="li")
    assert edit.find(tag="summary").text == "Changed 1 file"
    assert client.get("/runs/nope/").status_code == 404


def test_finishing_a_run_publishes_its_final_status(task, task_recorder):
    recorder = task_recorder()
    recorder.finish(status="completed", exit_code=0)
    event = OutboxEvent.objects.filter(type="run.trace").order_by("-id").first()
    payload = event.payload if isinstance(event.payload, dict) else json.loads(event.payload)
    assert payload["status"] == "completed" and payload["run_id"] == recorder.run.id
    assert payload["task_id"] == task.id


@pytest.mark.parametrize(
    ("value", "tokens", "usd"),
    [(0, "0", "$0.00"), (999, "999", "$999.00"), (12345, "12.3k", "$12,345.00"),
     (2_400_000, "2.4M", "$2,400,000.00"), (0.004, "0", "<$0.01")],
)  # fmt: skip
def test_usage_filters(value, tokens, usd):
    from core.templatetags.malamar import tokens as tokens_filter
    from core.templatetags.malamar import usd as usd_filter

    assert tokens_filter(value) == tokens
    assert usd_filter(value) == usd


def test_interrupted_runs_are_closed_with_an_event(db, workspace, task):
    from runner.services import agent_runs_close_interrupted as close_interrupted_runs

    live = _run(workspace, task, status="running")
    done = _run(workspace, task)
    assert close_interrupted_runs() == 1
    live.refresh_from_db()
    assert live.status == "interrupted" and live.ended_at is not None
    assert AgentRun.objects.get(id=done.id).status == "completed"
    event = OutboxEvent.objects.filter(type="run.trace").order_by("-id").first()
    assert event.payload["run_id"] == live.id and event.payload["status"] == "interrupted"
    assert event.payload["task_id"] == task.id


def test_run_timelines_need_exactly_one_owner(db, workspace, task):
    with pytest.raises(ValueError):
        run_timelines()
