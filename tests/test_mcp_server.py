"""`malamar mcp`: the MCP server driven by the SDK's own client over stdio, as an agent CLI does
(the server is a subprocess on a real database; every tool call goes through the protocol)."""

import asyncio
import json
import subprocess
from types import SimpleNamespace

import pytest
from mcp import Client, StdioServerParameters

from runner.worker.execution import mcp_server_for
from tests.live import ROOT, django_script, process_env
from tests.stack import data_dir_from

pytestmark = pytest.mark.live

SEED = """
import json
from core.actors import USER
from tasks.models import Task
from tasks.services import comment_create, task_create
from workspaces.models import Workspace
from workspaces.services import workspace_create

home = workspace_create(title="Website")
other = workspace_create(title="Elsewhere")
login = task_create(workspace=home, summary="Fix the login crash on Safari",
                    description="Safari users see a blank page after login.")
comment_create(task=login, content="It started with the new cookie banner.", actor=USER)
theme = task_create(workspace=home, summary="Dark theme for the settings page")
Task.objects.filter(id=theme.id).update(status="done")  # finished by the agents long ago
remember = task_create(workspace=home, summary="Login form: remember me checkbox",
                       blocked_by=[login.id])
secret = task_create(workspace=other, summary="Elsewhere's login task")
# Older ids may start with a dash (one in 64 did), which a command line reads as an option.
dashed = workspace_create(title="Dashed")
Workspace.objects.filter(id=dashed.id).update(id="-" + dashed.id[1:])
print(json.dumps({"home": home.id, "other": other.id, "login": login.id, "theme": theme.id,
                  "secret": secret.id, "remember": remember.id, "dashed": "-" + dashed.id[1:]}))
"""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory, template_db):
    data_dir = data_dir_from(template_db, tmp_path_factory.mktemp("mcp") / "data")
    ids = json.loads(django_script(data_dir, SEED).stdout.strip().splitlines()[-1])
    return data_dir, ids


def server(data_dir, workspace_id: str) -> StdioServerParameters:
    """`malamar mcp --workspace ID` exactly as Malamar's runs configure it for their CLI, started
    in a task folder whose own `tasks` package must not shadow Malamar's (its environment passed
    explicitly: the SDK gives a server only a minimal one)."""
    folder = data_dir.parent / "task-folder"
    (folder / "tasks").mkdir(parents=True, exist_ok=True)
    (folder / "tasks" / "__init__.py").write_text("raise SystemExit('the wrong tasks package')\n")
    run = mcp_server_for(SimpleNamespace(id=workspace_id, mcp_tools_enabled=True))
    return StdioServerParameters(
        command=run.command, args=list(run.args), env=process_env(data_dir), cwd=folder
    )


def run_without_client(params: StdioServerParameters) -> subprocess.CompletedProcess:
    """The server started with nothing on its stdin, for the refusals at start-up."""
    return subprocess.run(
        [params.command, *params.args],
        env=params.env,
        cwd=params.cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def session(data_dir, workspace_id: str, calls: list[tuple[str, dict]]) -> dict:
    """The tool list and each call's result, in order, over one connection."""

    async def talk():
        async with Client(server(data_dir, workspace_id)) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
            return tools, results

    tools, results = asyncio.run(talk())
    return {"tools": tools, "results": results}


def data(result) -> dict:
    """A successful call's answer: one JSON object, as the model reads it."""
    assert not result.is_error, result.content
    assert len(result.content) == 1
    return json.loads(result.content[0].text)


def error_text(result) -> str:
    assert result.is_error
    return result.content[0].text


@pytest.fixture(scope="module")
def conversation(seeded):
    data_dir, ids = seeded
    calls = [
        ("list_workspaces", {}),
        ("search_tasks", {}),
        ("search_tasks", {"query": "LOGIN"}),
        ("search_tasks", {"status": "Done"}),
        ("get_task", {"task_id": ids["login"]}),
        ("related_tasks", {"task_id": ids["login"]}),
        ("related_tasks", {"text": "settings page theme"}),
        ("create_task", {"summary": "Write a test for the Safari login", "description": "x"}),
        ("comment_on_task", {"task_id": ids["login"], "content": "Related: the banner PR."}),
        ("get_task", {"task_id": ids["login"]}),
        ("get_task", {"task_id": ids["secret"]}),
        ("comment_on_task", {"task_id": ids["secret"], "content": "hi"}),
        ("search_tasks", {"status": "someday"}),
        ("create_task", {"summary": "   "}),
        ("get_task", {"task_id": "nope"}),
        ("related_tasks", {}),
        ("search_tasks", {"limit": 0}),
    ]
    return ids, session(data_dir, ids["home"], calls)


def test_the_server_offers_read_and_write_tools(conversation):
    _ids, talk = conversation
    assert set(talk["tools"]) == {
        "list_workspaces",
        "search_tasks",
        "get_task",
        "related_tasks",
        "create_task",
        "comment_on_task",
        "review_task",
    }


def test_list_workspaces_marks_the_current_one(conversation):
    ids, talk = conversation
    rows = data(talk["results"][0])["workspaces"]
    current = {row["id"]: row["current"] for row in rows}
    assert current[ids["home"]] is True and current[ids["other"]] is False
    assert sum(current.values()) == 1


@pytest.mark.pg
def test_search_filters_by_text_and_status_within_the_workspace(conversation):
    ids, talk = conversation
    every, login, done = (data(result) for result in talk["results"][1:4])
    assert len(every["tasks"]) == 3 and every["more"] is False
    assert ids["secret"] not in {row["id"] for row in every["tasks"]}
    assert sorted(row["summary"] for row in login["tasks"]) == [
        "Fix the login crash on Safari",
        "Login form: remember me checkbox",
    ]
    assert [row["id"] for row in done["tasks"]] == [ids["theme"]]
    assert done["tasks"][0]["status"] == "done"


def test_get_task_has_its_comments_and_dependencies(conversation):
    ids, talk = conversation
    task = data(talk["results"][4])
    assert task["id"] == ids["login"]
    assert task["description"] == "Safari users see a blank page after login."
    assert [(c["author"], c["content"]) for c in task["comments"]] == [
        ("User", "It started with the new cookie banner.")
    ]
    assert task["dependencies"] == {
        "blocked_by": [],
        "blocks": [
            {"id": ids["remember"], "summary": "Login form: remember me checkbox", "status": "todo"}
        ],
    }


def test_related_tasks_rank_by_shared_words(conversation):
    ids, talk = conversation
    by_task, by_text = (data(talk["results"][i])["tasks"] for i in (5, 6))
    # "login" first; the theme task shares only "page" ("a blank page after login").
    assert [row["summary"] for row in by_task] == [
        "Login form: remember me checkbox",
        "Dark theme for the settings page",
    ]
    assert by_task[0]["similarity"] > by_task[1]["similarity"]
    assert ids["secret"] not in {row["id"] for row in by_task}  # other workspaces stay out
    assert by_text[0]["id"] == ids["theme"]
    assert 0 < by_text[0]["similarity"] <= 1


def test_create_and_comment_write_as_an_agent_via_mcp(conversation):
    ids, talk = conversation
    created = data(talk["results"][7])
    assert created["summary"] == "Write a test for the Safari login"
    assert created["status"] == "todo"
    comment = data(talk["results"][8])
    assert comment["task_id"] == ids["login"]
    after = data(talk["results"][9])
    assert after["comments"][-1]["author"] == "Agent via MCP"
    assert after["comments"][-1]["kind"] == "agent"


def test_other_workspaces_tasks_are_refused(conversation):
    ids, talk = conversation
    for result in talk["results"][10:12]:
        message = error_text(result)
        assert f"Task {ids['secret']} belongs to another workspace" in message
        assert ids["home"] in message  # the one this server acts for


def test_bad_input_is_a_tool_error_with_a_message(conversation):
    _ids, talk = conversation
    messages = [error_text(result) for result in talk["results"][12:]]
    assert "Unknown status 'someday'" in messages[0]
    # The SDK names the tool before the message: "Error executing tool create_task: …".
    assert messages[1].endswith(": Summary is required")
    assert messages[2].endswith(": No task with id 'nope'")
    assert messages[3].endswith(": Give either task_id or text")
    assert messages[4].endswith(": limit must be from 1 to 200")
    assert not any("Traceback" in message for message in messages)


@pytest.mark.pg
def test_writes_land_in_the_database_with_their_activity(seeded, conversation):
    data_dir, ids = seeded
    check = f"""
from tasks.models import Task, TaskLog
task = Task.objects.get(summary="Write a test for the Safari login")
assert task.workspace_id == {ids["home"]!r}, task.workspace_id
log = TaskLog.objects.get(task=task, event_type="task_created")
assert (log.actor_type, log.actor_id) == ("agent", "mcp"), (log.actor_type, log.actor_id)
assert task.queue_items.exists()  # the agents pick it up like any new task
print("ok")
"""
    assert django_script(data_dir, check).stdout.strip() == "ok"


def test_a_workspace_whose_id_starts_with_a_dash_gets_its_tools(seeded):
    data_dir, ids = seeded
    talk = session(data_dir, ids["dashed"], [("list_workspaces", {})])
    [current] = [row for row in data(talk["results"][0])["workspaces"] if row.get("current")]
    assert current["id"] == ids["dashed"]


def test_a_dashed_id_typed_after_workspace_is_read_as_the_id(seeded):
    """`malamar mcp --workspace -abc…` as a user types it into their CLI's MCP setup."""
    data_dir, _ids = seeded
    params = server(data_dir, "x")
    params.args[params.args.index("--workspace=x") :] = ["--workspace", "-nosuchworkspace"]
    done = run_without_client(params)
    assert "no workspace with id '-nosuchworkspace'" in done.stderr, done.stderr
    assert done.returncode == 1


def test_an_unknown_workspace_is_refused_at_start(seeded):
    data_dir, _ids = seeded
    done = run_without_client(server(data_dir, "nosuchworkspace"))
    assert done.returncode == 1
    assert "no workspace with id 'nosuchworkspace'" in done.stderr
    assert done.stdout == ""


def test_a_data_dir_without_malamars_database_is_a_message(tmp_path):
    done = run_without_client(server(tmp_path / "nothing-here", "anyworkspace"))
    assert done.returncode == 1
    assert "cannot read Malamar's database in" in done.stderr and "run `malamar`" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_stdout_carries_only_protocol_messages(seeded):
    """Logs (Malamar's go to stdout elsewhere; the SDK logs every tool error) never reach
    stdout, where a CLI would read them as broken protocol messages."""
    data_dir, ids = seeded
    params = server(data_dir, ids["home"])
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "get_task", "arguments": {"task_id": "nope"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "search_tasks", "arguments": {"query": "login"}},
        },
    ]
    process = subprocess.Popen(
        [params.command, *params.args],
        env={**params.env, "MALAMAR_LOG_LEVEL": "debug"},
        cwd=params.cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        process.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
        process.stdin.flush()
        lines = []
        while not {2, 3} <= {json.loads(line).get("id") for line in lines}:  # each line is JSON
            line = process.stdout.readline()
            assert line, f"the server ended early, after {lines}"
            lines.append(line)
    finally:
        process.stdin.close()
        process.wait(timeout=30)
    ids = [answer.get("id") for answer in map(json.loads, lines)]
    assert ids.count(1) == 1  # `initialize` answered once (early), not again by the SDK
    answers = {answer["id"]: answer for answer in map(json.loads, lines) if "id" in answer}
    assert set(answers) == {1, 2, 3}
    assert answers[2]["result"]["isError"] is True
    assert answers[3]["result"]["isError"] is False


def initialize(version: str, request_id=1) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }


def first_answer(argv: list[str], env: dict, cwd, message: dict) -> tuple[dict, int]:
    """The first line the server writes after `message`, and its exit code once its stdin
    closes."""
    done = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        input=json.dumps(message) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.splitlines()
    assert lines, done.stderr
    return json.loads(lines[0]), done.returncode


@pytest.mark.parametrize("version", ["2024-11-05", "2025-11-25", "1999-01-01"])
def test_the_early_initialize_answer_is_the_one_the_sdk_gives(seeded, version):
    """`malamar mcp` answers `initialize` before loading Django and the SDK
    (tasks/mcp_handshake.py); `manage.py mcp` leaves it to the SDK: the same answer, the
    protocol version chosen the same way (an unknown one gets the newest)."""
    data_dir, ids = seeded
    params = server(data_dir, ids["home"])
    early, _ = first_answer(
        [params.command, *params.args], params.env, params.cwd, initialize(version, "a")
    )
    manage = [params.command, str(ROOT / "manage.py"), "mcp", f"--workspace={ids['home']}"]
    sdk, _ = first_answer(manage, params.env, params.cwd, initialize(version, "a"))
    assert early == sdk
    assert early["result"]["serverInfo"]["name"] == "malamar"


def test_initialize_is_answered_before_django_loads(seeded):
    """The answer does not wait for Django: with settings that cannot even be imported, the
    server still answers `initialize` (and then stops with the import error)."""
    data_dir, ids = seeded
    params = server(data_dir, ids["home"])
    env = {**params.env, "DJANGO_SETTINGS_MODULE": "no_such_settings_module"}
    answer, code = first_answer(
        [params.command, *params.args], env, params.cwd, initialize("2025-06-18")
    )
    assert answer["id"] == 1 and answer["result"]["protocolVersion"] == "2025-06-18"
    assert code != 0
