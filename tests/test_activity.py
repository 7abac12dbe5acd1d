"""Live agent activity: stream parsing over the real samples, traces while runs are running,
tokens and cost, interrupted runs, and stalls.

The worker runs in-process (`stack`) except for a run killed with its worker (kill -9), which
needs a real worker process (`live_stack`).
"""

import asyncio
import json
import signal

import pytest

from runner.clis import cli_for
from runner.streams import Delta, Trace, Usage, parse_line
from tests.live import wait_until
from tests.stack import alive
from tests.test_clis import SAMPLES


def items(name: str) -> list:
    cli = name.split("_")[0]
    parser = cli_for(cli).stream_parser()
    return [
        i for line in (SAMPLES / name).read_text().splitlines() for i in parse_line(parser, line)
    ]


def traces(found) -> list[tuple]:
    return [(t.kind, t.action_kind, t.text) for t in found if isinstance(t, Trace)]


def usage(found) -> Usage:
    return [u for u in found if isinstance(u, Usage)][-1]


def test_claude_stream_sample():
    found = items("claude_stream_write.jsonl")
    got = traces(found)
    assert got[0][0] == "status" and got[0][2].startswith("Started (claude-opus")
    assert ("text", None, "I will write the file now.") in got
    assert got[2][:2] == ("action", "file-create") and got[2][2].endswith("/w/out.txt")
    assert got[-1] == ("text", None, "FAKE_DONE: the file has been written.")
    final = usage(found)
    assert final.total and final.cost_usd == pytest.approx(0.00046)
    assert final.output_tokens > 0


def test_claude_partial_deltas_and_retries():
    assert any(isinstance(i, Delta) for i in items("claude_stream_partial.jsonl"))
    retries = [t for t in traces(items("claude_stream_no_network.jsonl")) if "retry" in t[2]]
    assert retries[0][2] == "Model API unavailable, retry 1/10"


def test_gemini_stream_sample():
    found = items("gemini_stream_write.jsonl")
    assert traces(found)[1][:2] == ("action", "file-create")
    assert "".join(d.text for d in found if isinstance(d, Delta)) == (
        "FAKE_DONE: the file has been written."
    )
    assert (usage(found).input_tokens, usage(found).output_tokens) == (24, 10)
    errors = [t for t in traces(items("gemini_stream_401.jsonl")) if t[0] == "error"]
    assert "invalid x-api-key" in errors[0][2]


def test_codex_stream_sample():
    found = traces(items("codex_exec_json_cmd.jsonl"))
    command = next(t for t in found if t[1] == "command")
    assert command[2].startswith("Running `/bin/bash -lc 'echo hello-from-codex")
    result = next(t for t in found if t[1] == "command-result")
    assert result[2] == "Command finished (exit 0)"
    assert ("text", None, "FAKE_DONE: command executed.") in found
    assert usage(items("codex_exec_json_cmd.jsonl")).input_tokens == 24
    failed = traces(items("codex_exec_401.jsonl"))
    assert failed[-1][0] == "error" and "401" in failed[-1][2]
    waiting = traces(items("codex_exec_no_network.jsonl"))
    assert any("waiting for network" in t[2] for t in waiting)


def test_opencode_stream_sample():
    found = items("opencode_json_write.jsonl")
    assert traces(found)[:2][1][:2] == ("action", "file-create")
    costs = [u.cost_usd for u in found if isinstance(u, Usage)]
    assert costs == [0.000138, 0.000138]
    assert traces(items("opencode_json_401.jsonl")) == [("error", None, "fake: invalid x-api-key")]
    rejected = traces(items("opencode_json_rejected_permission.jsonl"))
    assert any(t[0] == "error" and "rejected permission" in t[2] for t in rejected)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "plain banner",
        "{broken",
        "[1,2]",
        '{"type": 5}',
        '{"type": "assistant", "message": "x"}',
    ],
)
@pytest.mark.parametrize("cli", ["claude", "gemini", "codex", "opencode"])
def test_odd_lines_are_ignored(cli, line):
    parser = cli_for(cli).stream_parser()
    assert all(not isinstance(i, Trace) or i.text for i in parse_line(parser, line))


@pytest.mark.pg
def test_traces_appear_while_the_run_is_still_running(stack):
    ws = stack.workspace(agents=[("Planner", "claude")])
    task = stack.task(ws, "@fake hold 60 review finished")  # until the test releases it

    def live_trace():
        runs = stack.api("GET", f"/tasks/{task['id']}/runs")["runs"]
        return runs and runs[0]["status"] == "running" and runs[0]["traces"]

    wait_until(live_trace, timeout=20, what="a trace while running")
    run = stack.api("GET", f"/tasks/{task['id']}/runs")["runs"][0]
    assert run["traces"][0]["kind"] == "status"
    assert stack.comments(task) == []  # the run has not ended yet
    (stack.temp_dir / f"malamar_task_{task['id']}" / "release").touch()
    stack.wait_status(task, "in_review")
    runs = stack.api("GET", f"/tasks/{task['id']}/runs")["runs"]
    first = runs[0]
    assert first["status"] == "completed" and first["exit_code"] == 0
    assert [t["seq"] for t in first["traces"]] == sorted(t["seq"] for t in first["traces"])
    assert first["cost_usd"] is not None and first["input_tokens"] is not None
    total = stack.api("GET", f"/workspaces/{ws['id']}/usage")
    assert total["runs"] == len(runs) and total["cost_usd"] > 0


@pytest.mark.pg
@pytest.mark.live
def test_restart_marks_a_killed_run_interrupted(live_stack):
    stack = live_stack
    ws = stack.workspace(agents=[("Planner", "codex")])
    task = stack.task(ws, "@fake sleep 30")
    run = stack.wait_run()[0]

    def runs():  # oldest first
        return stack.api("GET", f"/tasks/{task['id']}/runs")["runs"]

    # The run's row is written while its CLI starts (worker.pipeline._start): a worker killed
    # before that commit leaves a recorded process and no row (tests/test_restarts.py).
    wait_until(runs, timeout=10, what="the run's row")
    stack.worker.send_signal(signal.SIGKILL)
    stack.worker.wait()
    stack.start_worker()

    def killed_run_status():  # the killed run is the first
        return runs()[0]["status"]

    # The orphan may die by itself (a write to the dead worker's pipe), so wait for the new
    # worker's recovery to mark the run, not only for the orphan to be gone.
    wait_until(lambda: killed_run_status() == "interrupted", timeout=10, what="run interrupted")
    wait_until(lambda: not alive(run["pid"]), timeout=10, what="orphan killed")


@pytest.mark.pg
def test_a_silent_run_raises_a_stall_warning_and_the_hard_limit_kills_it(stack):
    stack.api("PUT", "/settings", {"stall_warning_minutes": 0.02}, expect=200)  # 1.2 s
    ws = stack.workspace(agents=[("Planner", "gemini")], stall_kill_minutes=0.05)  # 3 s
    task = stack.task(ws, "@fake sleep 60 comment never")
    run = stack.wait_run()[0]
    # The event as published (the outbox): its way to a browser is tests/test_events.py's.
    stalled = wait_until(
        lambda: stack.sql("SELECT payload FROM event_outbox WHERE type = 'run.stalled'"),
        timeout=20,
        what="run.stalled event",
    )
    stalled = json.loads(stalled[0][0])
    assert stalled["task_id"] == task["id"] and stalled["agent_name"] == "Planner"
    comment = stack.wait_comments(task, 1, timeout=20)[0]
    assert comment["content"].startswith("CLI produced no output for 0.05 minutes")
    assert not alive(run["pid"])
    assert stack.api("GET", f"/tasks/{task['id']}/runs")["runs"][0]["stalled_at"]


@pytest.mark.pg
def test_trace_events_are_batched(db, workspace):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runner.recorder import RunRecorder

    recorder = RunRecorder(
        cli_type="codex", workspace_id=workspace.id, agent_id=None, agent_name="A"
    )
    line = json.dumps(
        {"type": "item.started", "item": {"type": "command_execution", "command": "ls"}}
    )
    with CaptureQueriesContext(connection) as queries:
        for _ in range(1000):
            recorder.on_line(line)
        recorder.flush()
        recorder.finish(status="completed", exit_code=0)
    writes = [q for q in queries.captured_queries if not q["sql"].startswith("SELECT")]
    assert len(writes) < 30  # 1,000 lines, a handful of batched writes
    assert recorder.run.traces.count() == 1000


# --- what the agent does, in the user's terms (runner.streams.UserTerms) --------------------

KNOWLEDGE = "/opt/malamar/chats/knowledge"


def in_user_terms(cli: str, lines, cwd: str) -> list[tuple]:
    """Each CLI's parsed lines through the one rewrite the recorder applies."""
    from runner.streams import UserTerms

    parser, terms = cli_for(cli).stream_parser(), UserTerms(cwd=cwd, knowledge_dir=KNOWLEDGE)
    found = [i for line in lines for i in parse_line(parser, line) if isinstance(i, Trace)]
    return traces(t for t in map(terms.apply, found) if t is not None)


def sample_lines(name: str) -> list[str]:
    return (SAMPLES / name).read_text().splitlines()


@pytest.mark.parametrize(
    ("name", "cwd", "expected"),
    [
        ("claude_stream_write.jsonl", "/tmp/example/stretch/home_c/w", "Writing out.txt"),
        ("gemini_stream_write.jsonl", "/tmp/example/stretch/home_g/w", "Writing g_out.txt"),
        ("opencode_json_write.jsonl", "/tmp/example/stretch/home_oc/w", 'Writing oc_out.txt"'),
        (
            "codex_exec_json_cmd.jsonl",
            "/tmp/example/stretch/home_cx/w",
            "Running `echo hello-from-codex > codex_out.txt`",
        ),
    ],
)
def test_recorded_samples_show_paths_relative_to_the_working_directory(name, cwd, expected):
    got = in_user_terms(name.split("_")[0], sample_lines(name), cwd)
    assert expected in [text for kind, _, text in got if kind == "action"]
    assert not any(cwd in text for _, _, text in got)


def claude_tool(name: str, tool_input: dict) -> str:
    block = {"type": "tool_use", "id": f"toolu_{name}", "name": name, "input": tool_input}
    return json.dumps({"type": "assistant", "message": {"content": [block]}})


def claude_result(tool: str, text: str) -> str:
    block = {"type": "tool_result", "tool_use_id": f"toolu_{tool}", "content": text}
    return json.dumps({"type": "user", "message": {"content": [block]}})


def gemini_tool(name: str, tool_id: str, parameters: dict) -> str:
    return json.dumps(
        {"type": "tool_use", "tool_name": name, "tool_id": tool_id, "parameters": parameters}
    )


def codex_command(command: str, output: str) -> list[str]:
    item = {"id": "item_1", "type": "command_execution", "command": command}
    return [
        json.dumps({"type": "item.started", "item": {**item, "exit_code": None}}),
        json.dumps(
            {
                "type": "item.completed",
                "item": {**item, "aggregated_output": output, "exit_code": 0},
            }
        ),
    ]


CWD = "/home/me/project"
TASK_FILE = "/tmp/malamar/malamar_task_V1StGXR8_Z5jdHi6B-myT.md"
CHAT_FILE = "/tmp/malamar/malamar_chat_abc_def.md"
CONTEXT_FILE = "/tmp/malamar/malamar_chat_abc_def_context.md"
ANSWER_FILE = "/tmp/malamar/malamar_output_Q2w3E4r5T6y7U8i9O0pA.json"
CHAT_ANSWER_FILE = "/tmp/malamar/malamar_chat_output_Q2w3E4r5T6y7U8i9O0pA.json"


@pytest.mark.parametrize(
    ("cli", "lines", "expected"),
    [
        (
            "claude",
            [
                claude_tool("Read", {"file_path": TASK_FILE}),
                claude_tool("Read", {"file_path": f"{CWD}/app/models.py"}),
                claude_tool("Read", {"file_path": f"{KNOWLEDGE}/concepts.md"}),
                claude_tool("Glob", {"pattern": "*.md", "path": KNOWLEDGE}),
                claude_tool("Bash", {"command": f"cd {CWD} && pytest -q"}),
                claude_tool("Bash", {"command": f"cat {CONTEXT_FILE}"}),
                claude_result("Bash", "# Workspace context ..."),
                claude_tool("Write", {"file_path": ANSWER_FILE, "content": "{}"}),
                claude_tool("StructuredOutput", {"actions": []}),
            ],
            [
                ("action", "generic", "Reading the task"),
                ("action", "file-read", "Reading app/models.py"),
                ("action", "file-read", "Reading concepts.md in Malamar's guide"),
                ("action", "search", "Searching *.md"),
                ("action", "command", "Running `cd . && pytest -q`"),
                ("action", "generic", "Reading the workspace's setup"),
                ("action", "generic", "Writing the answer"),
                ("action", "generic", "Writing the answer"),
            ],
        ),
        (
            "gemini",
            [
                gemini_tool("read_file", "r1", {"absolute_path": CHAT_FILE}),
                gemini_tool(
                    "read_file",
                    "r2",
                    {"absolute_path": "/tmp/malamar/malamar_chat_abc_attachments/notes.txt"},
                ),
                gemini_tool("write_file", "w1", {"file_path": CHAT_ANSWER_FILE, "content": "{}"}),
            ],
            [
                ("action", "generic", "Reading the conversation"),
                ("action", "file-read", "Reading the attachment notes.txt"),
                ("action", "generic", "Writing the answer"),
            ],
        ),
        (
            "codex",
            [
                *codex_command(f"/bin/bash -lc 'cat {TASK_FILE}'", "# Task ..."),
                *codex_command(f"/bin/bash -lc 'ls {CWD}/src'", "a.py"),
                *codex_command(f"/bin/bash -lc \"cat > {ANSWER_FILE} <<'EOF'\n{{}}\nEOF\"", ""),
            ],
            [
                ("action", "generic", "Reading the task"),
                ("action", "command", "Running `ls src`"),
                ("action", "command-result", "Command finished (exit 0)"),
                ("action", "generic", "Writing the answer"),
            ],
        ),
        (
            "opencode",
            [
                json.dumps(
                    {
                        "type": "tool_use",
                        "part": {
                            "tool": tool,
                            "state": {"status": "completed", "input": {"filePath": path}},
                        },
                    }
                )
                for tool, path in (
                    ("read", TASK_FILE),
                    ("edit", f"{CWD}/README.md"),
                    ("write", ANSWER_FILE),
                )
            ],
            [
                ("action", "generic", "Reading the task"),
                ("action", "file-edit", "Editing README.md"),
                ("action", "generic", "Writing the answer"),
            ],
        ),
    ],
    ids=["claude", "gemini", "codex", "opencode"],
)
def test_malamar_plumbing_is_said_in_the_users_terms(cli, lines, expected):
    assert in_user_terms(cli, lines, CWD) == expected


MCP_FILE = "/tmp/malamar/malamar_output_Q2w3E4r5T6y7U8i9O0pA_mcp.json"


def codex_mcp(server: str, tool: str) -> str:
    item = {"id": "item_2", "type": "mcp_tool_call", "server": server, "tool": tool}
    return json.dumps({"type": "item.completed", "item": {**item, "status": "completed"}})


def opencode_tool(tool: str, tool_input: dict) -> str:
    state = {"status": "completed", "input": tool_input}
    return json.dumps({"type": "tool_use", "part": {"tool": tool, "state": state}})


@pytest.mark.parametrize(
    ("cli", "lines"),
    [
        (
            "claude",
            [
                claude_tool("mcp__malamar__search_tasks", {"query": "login"}),
                claude_tool("mcp__malamar__create_task", {"summary": "Fix the login"}),
                claude_tool("Read", {"file_path": MCP_FILE}),
                claude_tool("mcp__github__create_issue", {"title": "x"}),
            ],
        ),
        (
            "codex",
            [
                codex_mcp("malamar", "search_tasks"),
                codex_mcp("malamar", "create_task"),
                *codex_command(f"/bin/bash -lc 'cat {MCP_FILE}'", "{}"),
                codex_mcp("github", "create_issue"),
            ],
        ),
        (
            "gemini",
            [
                gemini_tool("search_tasks", "s1", {"query": "login"}),
                gemini_tool("malamar__create_task", "c1", {"summary": "Fix the login"}),
                gemini_tool("read_file", "r1", {"absolute_path": MCP_FILE}),
                gemini_tool("mcp__github__create_issue", "g1", {"title": "x"}),
            ],
        ),
        (
            "opencode",
            [
                opencode_tool("malamar_search_tasks", {"query": "login"}),
                opencode_tool("malamar_create_task", {"summary": "Fix the login"}),
                opencode_tool("read", {"filePath": MCP_FILE}),
                opencode_tool("github.create_issue", {"title": "x"}),
            ],
        ),
    ],
    ids=["claude", "codex", "gemini", "opencode"],
)
def test_malamars_mcp_tools_and_their_setup_are_said_in_the_users_terms(cli, lines):
    """What each CLI calls Malamar's MCP tools (`malamar mcp`), and the run's MCP config file,
    in words; another server's tool by its own name and server."""
    texts = [text for kind, _, text in in_user_terms(cli, lines, CWD) if kind == "action"]
    assert texts == [
        "Looking through the tasks",
        "Creating a task",
        "Reading Malamar's tool setup",
        "Using create_issue from github",
    ]


def test_every_malamar_mcp_tool_has_words():
    from runner.streams import MALAMAR_TOOLS
    from tasks.mcp_server import build_server

    served = {tool.name for tool in asyncio.run(build_server("w" * 21).list_tools())}
    assert served == set(MALAMAR_TOOLS)


def test_the_recorder_stores_and_shows_the_users_terms(db, workspace):
    from runner.recorder import RunRecorder

    recorder = RunRecorder(
        cli_type="claude", workspace_id=workspace.id, agent_id=None, agent_name="A"
    )
    recorder.use_working_directory(CWD)
    recorder.on_line(claude_tool("Read", {"file_path": TASK_FILE}))
    recorder.flush()
    recorder.run.refresh_from_db()
    assert recorder.run.current_action == "Reading the task"
    recorder.on_line(claude_tool("Edit", {"file_path": f"{CWD}/app/views.py"}))
    recorder.on_line(claude_tool("StructuredOutput", {"actions": [{"type": "skip"}]}))
    recorder.finish(status="completed", exit_code=0)
    recorder.run.refresh_from_db()
    assert recorder.run.current_action == "Writing the answer"
    texts = list(recorder.run.traces.order_by("seq").values_list("text", flat=True))
    assert texts == ["Reading the task", "Editing app/views.py", "Writing the answer"]


def test_the_recorder_calls_the_knowledge_base_it_is_given_malamars_guide(db, workspace):
    from runner.recorder import RunRecorder

    recorder = RunRecorder(
        cli_type="claude",
        workspace_id=workspace.id,
        agent_id=None,
        agent_name="Malamar",
        knowledge_dir=KNOWLEDGE,
    )
    recorder.on_line(claude_tool("Read", {"file_path": f"{KNOWLEDGE}/concepts.md"}))
    recorder.finish(status="completed", exit_code=0)
    texts = list(recorder.run.traces.values_list("text", flat=True))
    assert texts == ["Reading concepts.md in Malamar's guide"]


def test_a_live_run_never_shows_malamars_plumbing(stack):
    ws = stack.workspace(agents=[("Planner", "claude")])
    task = stack.task(ws, "@fake work 1 comment done")
    stack.wait_comments(task, 1)
    run = stack.api("GET", f"/tasks/{task['id']}/runs")["runs"][0]
    texts = [t["text"] for t in run["traces"]]
    assert "Writing the answer" in texts  # the fake answers with Claude's StructuredOutput
    assert "Running `pytest -q`" in texts and "Editing app/models.py" in texts
    assert not [text for text in texts if "StructuredOutput" in text or "malamar_" in text]
    assert run["current_action"] == "Writing the answer"
