"""Chat processing in the worker (in-process) with the fake CLIs (chat mode: `@fake reply` /
`action`)."""

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.live import wait_until
from tests.stack import alive


def chat(stack, ws, agent_id=None, **fields):
    return stack.api(
        "POST", f"/workspaces/{ws['id']}/chats", {"agent_id": agent_id, **fields}, expect=201
    )


def send(stack, c, *lines, expect=201):
    return stack.api(
        "POST", f"/chats/{c['id']}/messages", {"message": "\n".join(lines)}, expect=expect
    )


def first_reply(stack, c, directive: str) -> tuple[str, str]:
    """Send `directive` as the chat's first message: its reply's (role, message)."""
    send(stack, c, "x", directive)
    last = wait_reply(stack, c)["messages"][-1]
    return last["role"], last["message"]


def detail(stack, c):
    return stack.api("GET", f"/chats/{c['id']}")


def wait_reply(stack, c, count=1, timeout=30):
    """Wait until `count` agent/system replies exist and the chat is idle."""

    def done():
        d = detail(stack, c)
        replies = [m for m in d["messages"] if m["role"] != "user"]
        return d if len(replies) >= count and not d["is_processing"] else None

    return wait_until(done, timeout=timeout, what="chat reply")


def action(**fields):
    return "@fake action " + json.dumps(fields)


def finished_outcomes(stack, c) -> list:
    """`outcome` of each chat.processing_finished event of chat `c`, oldest first."""
    rows = stack.sql(
        "SELECT payload FROM event_outbox WHERE type = 'chat.processing_finished' ORDER BY id"
    )
    payloads = [json.loads(payload) for (payload,) in rows]
    return [p.get("outcome") for p in payloads if p["chat_id"] == c["id"]]


def chat_runs(stack):
    return [r for r in stack.fake_runs() if (r.get("input_path") or "").find("malamar_chat_") >= 0]


@pytest.mark.pg
def test_malamar_creates_an_agent_and_renames_the_chat(stack):
    ws = stack.workspace()
    c = chat(stack, ws)
    send(
        stack,
        c,
        "Make me a reviewer",
        "@fake reply Created your Reviewer.",
        action(type="create_agent", name="Reviewer", instruction="Review code.", cli_type="codex"),
        action(type="rename_chat", title="Reviewer setup"),
    )
    d = wait_reply(stack, c)
    reply = d["messages"][-1]
    assert (reply["role"], reply["message"]) == ("agent", "Created your Reviewer.")
    assert [a["result"] for a in reply["actions"]] == ["ok", "ok"]
    assert d["title"] == "Reviewer setup"
    agents = stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"]
    assert [(a["name"], a["cli_type"]) for a in agents] == [("Reviewer", "codex")]
    assert chat_runs(stack)[0]["cli"] == "claude"  # Malamar: the first available CLI


def test_every_malamar_action_success_and_failure(stack):
    ws = stack.workspace(agents=[("Planner", "claude"), ("Coder", "gemini")])
    agents = {
        a["name"]: a["id"] for a in stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"]
    }
    c = chat(stack, ws)
    send(
        stack,
        c,
        "Do it all",
        "@fake reply Done what I could.",
        action(type="create_agent", name="Planner", instruction="dup"),
        action(type="create_agent", name="Tester", instruction="Test things."),
        action(type="update_agent", agent_id=agents["Coder"], instruction="Code carefully."),
        action(type="update_agent", agent_id="nope", name="X"),
        action(type="reorder_agents", agent_ids=[agents["Coder"], agents["Planner"]]),
        action(type="delete_agent", agent_id="nope"),
        action(type="update_workspace", retention_days=3, description="New rules"),
        action(type="update_workspace", working_directory_mode="moon"),
        action(type="create_task", summary="Write the README", description="Short"),
        action(type="create_task", summary=""),
    )
    d = wait_reply(stack, c, count=2)
    reply, note = d["messages"][-2:]
    assert [a["result"] for a in reply["actions"]] == [
        "failed",
        "ok",
        "ok",
        "failed",
        "failed",
        "failed",
        "ok",
        "failed",
        "ok",
        "failed",
    ]
    assert note["role"] == "system"
    lines = note["message"].splitlines()
    assert lines[0] == "Action failed: create_agent - Agent name 'Planner' already exists"
    assert lines[1] == "Action failed: update_agent - Agent nope not found in this workspace"
    assert lines[2].startswith("Action failed: reorder_agents - agent_ids must list")
    assert lines[3] == "Action failed: delete_agent - Agent nope not found in this workspace"
    assert lines[4].startswith("Action failed: update_workspace - working_directory_mode")
    assert lines[5] == "Action failed: create_task - 'summary' is required"
    after = {a["name"]: a for a in stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"]}
    assert set(after) == {"Planner", "Coder", "Tester"}
    assert after["Coder"]["instruction"] == "Code carefully."
    workspace = stack.api("GET", f"/workspaces/{ws['id']}")
    assert (workspace["retention_days"], workspace["description"]) == (3, "New rules")
    tasks = stack.api("GET", f"/workspaces/{ws['id']}/tasks")["tasks"]
    assert [t["summary"] for t in tasks] == ["Write the README"]
    assert reply["actions"][8]["task_id"] == tasks[0]["id"]  # the page links to the new task
    # A second round: reorder and delete succeed.
    send(
        stack,
        c,
        "Tidy up",
        "@fake reply ok",
        action(
            type="reorder_agents",
            agent_ids=[after["Tester"]["id"], agents["Coder"], agents["Planner"]],
        ),
        action(type="delete_agent", agent_id=agents["Planner"]),
    )
    d = wait_reply(stack, c, count=3)
    assert [a["result"] for a in d["messages"][-1]["actions"]] == ["ok", "ok"]
    names = [a["name"] for a in stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"]]
    assert names == ["Tester", "Coder"]


def test_rename_only_on_the_first_reply(stack):
    ws = stack.workspace()
    c = chat(stack, ws)
    send(stack, c, "hi", "@fake reply hello", action(type="rename_chat", title="First"))
    wait_reply(stack, c)
    send(stack, c, "again", "@fake reply hi again", action(type="rename_chat", title="Second"))
    d = wait_reply(stack, c, count=2)
    assert d["title"] == "First"
    assert d["messages"][-1]["actions"][0]["result"] == "ignored"
    assert [m["role"] for m in d["messages"]] == ["user", "agent", "user", "agent"]


def test_workspace_agents_may_only_rename_and_create_tasks(stack):
    ws = stack.workspace(agents=[("Planner", "gemini")])
    planner = stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"][0]
    c = chat(stack, ws, agent_id=planner["id"])
    send(
        stack,
        c,
        "plan",
        "@fake reply Here is a plan",
        action(type="rename_chat", title="Planning"),
        action(type="create_task", summary="Step one"),
        action(type="create_agent", name="Sneaky", instruction="x"),
        action(type="update_workspace", title="Hijacked"),
    )
    d = wait_reply(stack, c, count=2)
    assert [a["result"] for a in d["messages"][-2]["actions"]] == ["ok", "ok", "failed", "failed"]
    assert "only the Malamar agent" in d["messages"][-1]["message"]
    assert d["title"] == "Planning"
    assert stack.api("GET", f"/workspaces/{ws['id']}")["title"] == ws["title"]
    assert chat_runs(stack)[0]["cli"] == "gemini"  # the agent's CLI


def test_cli_override_agent_switch_and_agent_deletion(stack):
    ws = stack.workspace(agents=[("Planner", "codex")])
    planner = stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"][0]
    c = chat(stack, ws)
    stack.api("PUT", f"/chats/{c['id']}", {"cli_type": "opencode"}, expect=200)
    send(stack, c, "one", "@fake reply 1")
    wait_reply(stack, c)
    stack.api("PUT", f"/chats/{c['id']}", {"agent_id": planner["id"]}, expect=200)
    d = detail(stack, c)
    assert d["messages"][-1]["message"] == "Switched from Malamar to Planner"
    assert d["cli_type"] is None  # follows the new agent
    send(stack, c, "two", "@fake reply 2")
    wait_reply(stack, c, count=3)
    stack.api("DELETE", f"/agents/{planner['id']}")
    assert detail(stack, c)["messages"][-1]["message"] == "Switched from Planner to Malamar"
    send(stack, c, "three", "@fake reply 3")
    d = wait_reply(stack, c, count=5)
    assert [r["cli"] for r in chat_runs(stack)] == ["opencode", "codex", "claude"]
    assert d["agent_name"] == "Malamar"


@pytest.mark.pg
def test_malamar_falls_back_to_the_next_healthy_cli(stack):
    # Its login breaks: saving its settings re-checks it.
    body = {"cli_settings": {"claude": {"env": {"MALAMAR_FAKE_HEALTH": "fail"}}}}
    stack.api("PUT", "/settings", body, expect=200)
    wait_until(
        lambda: stack.api("GET", "/health/cli")["clis"][0]["status"] == "unhealthy",
        timeout=20,
        what="claude unhealthy",
    )
    ws = stack.workspace()
    c = chat(stack, ws)
    send(stack, c, "hi", "@fake reply from codex")
    wait_reply(stack, c)
    assert chat_runs(stack)[0]["cli"] == "codex"  # Claude → Codex → Gemini → OpenCode


@pytest.mark.pg
def test_second_send_is_refused_and_cancel_kills_the_run(stack):
    ws = stack.workspace()
    c = chat(stack, ws)
    send(stack, c, "slow", "@fake grandchild 60 reply never")
    wait_until(lambda: chat_runs(stack), timeout=20, what="chat run")
    run = chat_runs(stack)[0]
    refused = stack.request("POST", f"/api/chats/{c['id']}/messages", {"message": "again"})
    assert refused.status_code == 409
    stack.api("POST", f"/chats/{c['id']}/cancel", expect=200)
    wait_until(lambda: not alive(run["pid"]), timeout=30, what="chat CLI to die")
    wait_until(lambda: not detail(stack, c)["is_processing"], timeout=10, what="idle chat")
    roles = [m["role"] for m in detail(stack, c)["messages"]]
    assert "agent" not in roles
    assert stack.sql("SELECT status FROM chat_queue WHERE chat_id = ?", c["id"]) == [("failed",)]
    # The page must not toast "replied" for a stopped run.
    wait_until(lambda: finished_outcomes(stack, c), timeout=10, what="processing_finished")
    assert finished_outcomes(stack, c) == ["stopped"]
    send(stack, c, "ok now", "@fake reply fine")
    assert wait_reply(stack, c, count=2)["messages"][-1]["message"] == "fine"
    wait_until(lambda: len(finished_outcomes(stack, c)) == 2, timeout=10, what="second finish")
    assert finished_outcomes(stack, c) == ["stopped", "replied"]


@pytest.mark.pg
def test_two_chats_of_one_workspace_answer_at_the_same_time(stack):
    ws = stack.workspace()
    chats = [chat(stack, ws) for _ in range(2)]
    for c in chats:
        send(stack, c, "go", "@fake sleep 2 reply done")
    for c in chats:
        wait_reply(stack, c)
    spans = stack.sql("SELECT started_at, ended_at FROM agent_runs")
    assert len(spans) == len(chat_runs(stack)) == 2
    # Each CLI sleeps 2 s: had the second waited for the first, it would start after it ended.
    assert max(start for start, _ in spans) < min(end for _, end in spans), (
        "the second did not wait for the first"
    )


def test_chat_errors_become_system_messages(stack):
    c = chat(stack, stack.workspace())
    assert first_reply(stack, c, "@fake exit 2 quota exceeded") == (
        "system",
        "quota exceeded (CLI exited with code 2)",
    )
    wait_until(lambda: finished_outcomes(stack, c), timeout=10, what="processing_finished")
    assert finished_outcomes(stack, c) == ["failed"]
    send(stack, c, "y", "@fake invalid-json")
    d = wait_reply(stack, c, count=2)
    assert d["messages"][-1]["message"].startswith("CLI output was not valid JSON")
    send(stack, c, "z", '@fake json {"message": 5}')
    d = wait_reply(stack, c, count=3)
    assert d["messages"][-1]["message"].startswith("CLI output structure was invalid")


def test_deeply_nested_chat_output_is_a_system_message_not_a_crash(stack):
    c = chat(stack, stack.workspace())
    assert first_reply(stack, c, "@fake nested 100000") == (
        "system",
        "CLI output was not valid JSON: nested more than 200 levels deep",
    )
    send(stack, c, "y", "@fake reply still here")
    d = wait_reply(stack, c, count=2)
    assert (d["messages"][-1]["role"], d["messages"][-1]["message"]) == ("agent", "still here")
    assert stack.worker_alive()


def test_chat_input_and_context_files(start_stack):
    stack = start_stack(health_at_start=True)  # (the context lists the CLIs' health)
    wait_until(
        lambda: all(c["status"] == "healthy" for c in stack.api("GET", "/health/cli")["clis"]),
        timeout=20,
        what="health",
    )
    ws = stack.workspace(agents=[("Planner", "claude")], description="Ship small changes")
    planner = stack.api("GET", f"/workspaces/{ws['id']}/agents")["agents"][0]
    c = chat(stack, ws)
    notes = SimpleUploadedFile("notes.txt", b"hello")
    uploaded = stack.client.post(f"/api/chats/{c['id']}/attachments", {"files": [notes]})
    assert uploaded.status_code < 400, uploaded.content
    send(stack, c, "What do my agents do?", "@fake reply They plan.")
    wait_reply(stack, c, count=2)
    run = chat_runs(stack)[0]
    input_file = Path(run["input_path"])  # one input file per run: malamar_chat_{chat}_{item}.md
    assert input_file.name.startswith(f"malamar_chat_{c['id']}_")
    context_file = input_file.with_name(input_file.stem + "_context.md")
    for path in (input_file, context_file):
        assert oct(path.stat().st_mode & 0o777) == "0o600"
    text = input_file.read_text()
    order = [
        "# Malamar Chat Context",
        "You are being invoked by Malamar's chat feature.",
        "## Chat Metadata",
        f"- Chat ID: {c['id']}",
        "- Agent: Malamar",
        "## Conversation History",
        '"role": "system"',
        "User has uploaded",
        '"role": "user"',
        "## Additional Context",
        str(context_file),
        "# Output Instruction",
        "Write your response as JSON to: ",
    ]
    position = 0
    for marker in order:  # each marker after the previous one
        position = text.index(marker, position) + len(marker)
    assert "knowledge" in text  # Malamar's instruction points at the bundled knowledge base
    context = context_file.read_text()
    assert f"Planner (id: {planner['id']})" in context
    assert "Ship small changes" in context
    assert "Mailgun is not configured." in context
    assert "Claude Code (claude): healthy" in context
    run = chat_runs(stack)[0]
    assert run["cwd"] == str(stack.temp_dir / f"malamar_chat_{c['id']}")
