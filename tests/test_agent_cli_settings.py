"""Agents as people set them up: model, reasoning effort and extra arguments per agent, and the
custom command CLI (issue 19). Adapters get them into the argv; validation names the argument;
runs record the model; a custom command runs a task through the same pipeline as the four."""

import os
import sys
import threading
from pathlib import Path

import pytest

from agents.forms import AgentForm
from agents.models import Agent
from agents.services import agent_create, agent_update
from chats.actions import execute_actions
from chats.models import ChatParticipant, ChatQueueItem
from chats.services import chat_start
from core.errors import ValidationFailed
from runner.clis import cli_for
from runner.clis.base import CustomCommand, Invocation, RunOptions, TemplateError, fill
from runner.models import AgentRun, CliHealth, CliHealthStatus
from runner.schemas import chat_schema
from tasks.models import Task, TaskQueueItem, TaskStatus
from tasks.services import task_create
from tests.conftest import cli_invocation, error_of
from tests.htmltree import parse
from tests.pages import html, hx
from tests.stack import FAKES_BIN
from worker import health
from worker.pipeline import ChatReply, TaskPass
from workspaces.services import workspace_create

PROMPT = "Read the file at /t/in.md and follow the instruction autonomously."


def invocation(tmp_path: Path, **options) -> Invocation:
    return cli_invocation(
        tmp_path,
        prompt=PROMPT,
        options=RunOptions(**options),
        input_path=tmp_path / "in.md",
        cwd="/work/project",
    )


# --- the adapters put the agent's settings into the argv ----------------------------------


def test_claude_gets_model_effort_and_extra_args(tmp_path):
    argv = (
        cli_for("claude")
        .command(invocation(tmp_path, model="sonnet", effort="high", extra_args=("--x", "1")))
        .argv
    )
    assert argv[:3] == ["/bin/cli", "-p", PROMPT]
    assert argv[-6:] == ["--model", "sonnet", "--effort", "high", "--x", "1"]


def test_codex_gets_them_before_its_prompt(tmp_path):
    options = {"model": "o3", "effort": "high", "extra_args": ("--oss",)}
    argv = cli_for("codex").command(invocation(tmp_path, **options)).argv
    assert argv[-1] == PROMPT  # a positional argument: options must come before it
    assert argv[-6:-1] == ["-m", "o3", "-c", "model_reasoning_effort=high", "--oss"]


def test_gemini_gets_a_model_and_has_no_effort(tmp_path):
    cli = cli_for("gemini")
    assert cli.efforts == ()
    argv = cli.command(invocation(tmp_path, model="gemini-2.5-pro", extra_args=("--debug",))).argv
    assert argv[-3:] == ["-m", "gemini-2.5-pro", "--debug"]
    assert argv[-5:-3] == ["-o", "stream-json"]


def test_opencode_gets_provider_model_and_variant(tmp_path):
    options = {"model": "anthropic/claude-sonnet-4-5", "effort": "max", "extra_args": ("--pure",)}
    command = cli_for("opencode").command(invocation(tmp_path, **options))
    assert command.argv == [
        "/bin/cli",
        "run",
        "--auto",
        "--format",
        "json",
        "--print-logs",
        "--log-level",
        "WARN",
        "-m",
        "anthropic/claude-sonnet-4-5",
        "--variant",
        "max",
        "--pure",
    ]
    assert command.stdin == PROMPT.encode()


@pytest.mark.parametrize("cli", ["claude", "gemini", "codex", "opencode"])
def test_no_settings_leave_the_measured_invocation_alone(cli, tmp_path):
    plain = cli_invocation(tmp_path, prompt=PROMPT)
    assert cli_for(cli).command(plain) == cli_for(cli).command(invocation(tmp_path))


# --- custom command templates ---------------------------------------------------------------


def test_a_template_fills_each_argument_without_a_shell(tmp_path):
    command = CustomCommand(binary="agent", args="--message {prompt} --out={output_file} '$HOME'")
    cli = cli_for("custom").configured(RunOptions(custom=command))
    argv = cli.command(invocation(tmp_path, custom=command)).argv
    assert argv == ["/bin/cli", "--message", PROMPT, f"--out={tmp_path / 'out.json'}", "$HOME"]


@pytest.mark.parametrize("cli_type", ["claude", "codex", "gemini", "opencode"])
def test_a_model_with_spaces_and_quotes_is_one_argument_after_its_flag(tmp_path, cli_type):
    cli = cli_for(cli_type)
    model = 'my "odd" model; rm -rf ~'
    argv = cli.command(invocation(tmp_path, model=model)).argv
    assert argv.count(model) == 1
    assert argv[argv.index(model) - 1] == cli.model_flag


def test_model_arguments_drop_out_without_a_model():
    template = "run {input_file} --model={model} -C {cwd} --files {temp_dir}"
    values = {"prompt": "", "input_file": "/t/in.md", "cwd": "/w", "temp_dir": "/t"}
    assert fill(template, {**values, "model": ""}) == [
        "run",
        "/t/in.md",
        "-C",
        "/w",
        "--files",
        "/t",
    ]
    assert "--model=qwen3" in fill(template, {**values, "model": "qwen3"})


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("--msg {promt}", "unknown placeholder {promt}"),
        ("--msg {prompt!r}", "unknown placeholder {prompt}"),
        ("--msg {prompt.upper}", "unknown placeholder {prompt.upper}"),
        ("--msg '{prompt}", "cannot be split"),
        ("--msg {", "write {{ for a brace"),
    ],
)
def test_bad_templates_are_refused_with_a_reason(template, message):
    with pytest.raises(TemplateError, match=message.replace("{", r"\{").replace(".", r"\.")):
        fill(template, {})


# --- validation: services, API, form ---------------------------------------------------------


@pytest.mark.parametrize(
    ("cli", "arg", "named"),
    [
        ("claude", "--output-format=json", "--output-format"),
        ("claude", "--permission-mode", "--permission-mode"),
        ("claude", "--model", "--model"),
        ("gemini", "-o", "-o"),
        ("gemini", "--approval-mode=default", "--approval-mode"),
        ("codex", "--sandbox", "--sandbox"),
        ("codex", "model_reasoning_effort=low", "-c model_reasoning_effort"),
        ("codex", "-csandbox_mode=read-only", "-c sandbox_mode"),
        ("opencode", "--format", "--format"),
        ("opencode", "-mopenai/gpt-5", "-m"),
    ],
)
def test_extra_args_that_break_the_contract_are_refused(workspace, cli, arg, named):
    with pytest.raises(ValidationFailed) as caught:
        agent_create(workspace=workspace, name="A", instruction="x", cli_type=cli, extra_args=[arg])
    assert caught.value.field == "extra_args"
    assert repr(arg) in caught.value.message and named in caught.value.message


def test_harmless_extra_args_are_kept(workspace):
    agent = agent_create(
        workspace=workspace,
        name="A",
        instruction="x",
        cli_type="codex",
        extra_args=["-c", "model_verbosity=low", "--oss"],
    )
    assert Agent.objects.get(id=agent.id).extra_args == ["-c", "model_verbosity=low", "--oss"]


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"extra_args": ["a\nb"]}, "extra_args", "line breaks"),
        ({"extra_args": ["a\x00"]}, "extra_args", "NUL"),
        ({"model": "op\nus"}, "model", "line breaks"),
        ({"model": "--dangerous"}, "model", "not an option"),
        ({"reasoning_effort": "huge"}, "reasoning_effort", "one of low, medium"),
        ({"cli_type": "gemini", "reasoning_effort": "high"}, "reasoning_effort", "has no"),
    ],
)
def test_bad_settings_are_refused(workspace, changes, field, message):
    values = {"cli_type": "claude", **changes}
    with pytest.raises(ValidationFailed, match=message) as caught:
        agent_create(workspace=workspace, name="A", instruction="x", **values)
    assert caught.value.field == field


def test_a_new_cli_resets_the_old_clis_settings(workspace):
    agent = agent_create(
        workspace=workspace,
        name="A",
        instruction="x",
        cli_type="claude",
        model="opus",
        reasoning_effort="max",
        extra_args=["--verbose"],
    )
    agent_update(agent=agent, cli_type="gemini")
    agent.refresh_from_db()
    assert (agent.model, agent.reasoning_effort, agent.extra_args) == ("", "", [])
    agent_update(agent=agent, model="gemini-2.5-pro")
    agent.refresh_from_db()
    assert (agent.cli_type, agent.model) == ("gemini", "gemini-2.5-pro")


def test_the_api_takes_and_returns_the_settings(api, workspace):
    body = {
        "name": "Coder",
        "instruction": "Code.",
        "cli_type": "codex",
        "model": "o3",
        "reasoning_effort": "high",
        "extra_args": ["--oss"],
    }
    created = api.post(f"/api/workspaces/{workspace.id}/agents", body)
    assert created.status_code == 201, created.json()
    agent = created.json()
    assert (agent["model"], agent["reasoning_effort"], agent["extra_args"]) == (
        "o3",
        "high",
        ["--oss"],
    )
    refused = api.put(f"/api/agents/{agent['id']}", {"extra_args": ["--json"]})
    assert refused.status_code == 400
    error = error_of(refused)
    assert error["code"] == "VALIDATION_ERROR" and "'--json'" in error["message"]
    wrong_type = api.put(f"/api/agents/{agent['id']}", {"extra_args": "--oss"})
    assert wrong_type.status_code == 400


def test_the_api_refuses_a_custom_command_without_a_usable_template(api, workspace):
    body = {"name": "Mine", "instruction": "x", "cli_type": "custom", "custom_binary": "aider"}
    missing = api.post(f"/api/workspaces/{workspace.id}/agents", body)
    assert missing.status_code == 400 and "{prompt} or {input_file}" in error_of(missing)["message"]
    unknown = api.post(
        f"/api/workspaces/{workspace.id}/agents", {**body, "custom_args": "-m {prompt} {file}"}
    )
    assert (
        unknown.status_code == 400 and "unknown placeholder {file}" in error_of(unknown)["message"]
    )
    ok = api.post(f"/api/workspaces/{workspace.id}/agents", {**body, "custom_args": "-m {prompt}"})
    assert ok.status_code == 201
    assert CliHealth.objects.get(cli_type=f"custom:{ok.json()['id']}").refresh_requested_at


def test_the_dialog_shows_the_error_on_the_field(client, workspace):
    data = {
        "name": "Reviewer",
        "instruction": "Review.",
        "cli_type": "claude",
        "model": "sonnet",
        "reasoning_effort": "high",
        "extra_args": "--verbose\n--permission-mode\nplan",
    }
    response = hx(client, "post", f"/workspaces/{workspace.id}/agents/new/", data)
    [invalid] = parse(html(response)).find_all("field--invalid")
    assert invalid.find(tag="textarea", name="extra_args") is not None
    assert "Extra argument '--permission-mode' is not allowed for Claude Code" in (
        invalid.find("field__error").text
    )
    assert not Agent.objects.filter(name="Reviewer").exists()
    del data["extra_args"]
    hx(client, "post", f"/workspaces/{workspace.id}/agents/new/", data)
    agent = Agent.objects.get(name="Reviewer")
    assert (agent.model, agent.reasoning_effort) == ("sonnet", "high")
    edit = html(hx(client, "get", f"/agents/{agent.id}/edit/"))
    assert 'value="sonnet"' in edit and '<option value="high" selected>' in edit
    # Picking Gemini CLI in it reads Gemini's settings, keeping the model typed.
    picked = {"cli_type": "gemini", "model": "sonnet", "reasoning_effort": "high"}
    gemini = html(hx(client, "get", f"/workspaces/{workspace.id}/agents/cli-settings/", picked))
    assert "Gemini CLI has no reasoning effort setting" in gemini and 'value="sonnet"' in gemini


# --- the Malamar agent ---------------------------------------------------------------------


def test_the_malamar_agent_sets_model_and_effort(workspace):
    chat = chat_start(workspace=workspace, message="Add a cheap reviewer")
    actions = [
        {
            "type": "create_agent",
            "name": "Reviewer",
            "instruction": "Review.",
            "cli_type": "claude",
            "model": "haiku",
            "reasoning_effort": "low",
            "extra_args": None,
        }
    ]
    [created] = execute_actions(chat=chat, actions=actions, is_malamar=True)
    assert created.error is None
    agent = Agent.objects.get(id=created.action["agent_id"])
    assert (agent.model, agent.reasoning_effort) == ("haiku", "low")
    update = {"type": "update_agent", "agent_id": agent.id, "extra_args": ["--json-schema", "{}"]}
    [refused] = execute_actions(chat=chat, actions=[update], is_malamar=True)
    assert "'--json-schema' is not allowed" in refused.error
    for schema in (chat_schema(malamar=True),):
        properties = schema["properties"]["actions"]["items"]["properties"]
        assert properties["model"] == {"type": ["string", "null"]}
        assert properties["extra_args"]["type"] == ["array", "null"]


# --- runs: the model, the custom command, the chat override ----------------------------------


@pytest.fixture
def fake_clis(monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")


def _run_pass(task):
    item = TaskQueueItem.objects.queued().get(task=task)
    assert TaskQueueItem.objects.claim(item.id)
    TaskPass(item, stop=threading.Event(), shutdown=threading.Event()).run()
    task.refresh_from_db()
    return task


@pytest.mark.django_db(transaction=True)
def test_runs_record_the_model_the_cli_reported_else_the_configured_one(fake_clis, client):
    workspace = workspace_create(title="Models")
    agent_create(workspace=workspace, name="Planner", instruction="Skip.", model="sonnet")
    agent_create(
        workspace=workspace,
        name="Coder",
        instruction="Skip.",
        cli_type="codex",
        model="o3",
        reasoning_effort="high",
    )
    agent_create(workspace=workspace, name="Plain", instruction="Skip.", cli_type="opencode")
    task = _run_pass(task_create(workspace=workspace, summary="Pick models"))
    assert task.status == TaskStatus.IN_REVIEW
    runs = {run.agent_name: run for run in AgentRun.objects.filter(task=task)}
    assert {name: run.status for name, run in runs.items()} == dict.fromkeys(runs, "completed")
    assert runs["Planner"].model == "claude-sonnet-4-6[1m]"  # claude's init event says so
    assert runs["Coder"].model == "o3"  # codex does not say: the agent's setting
    assert runs["Plain"].model == ""  # the CLI's default, unreported
    page = html(hx(client, "get", f"/tasks/{task.id}/", target="task-activity"))
    models = {model.text for model in parse(page).find_all("run__model")}
    assert models == {"claude-sonnet-4-6[1m]", "o3"}  # none shown for the CLI's default


SCRIPT = """#!{python}
import json, os, re, sys
args = sys.argv[1:]
open({log!r}, "a").write(json.dumps(args + [os.environ.get("MY_KEY")]) + "\\n")
if "--stdout" in args:
    print("thinking...")
    print(json.dumps({{"actions": [{{"type": "comment", "content": "From stdout"}},
                                  {{"type": "change_status", "status": "in_review"}}]}}))
    sys.exit(0)
if "--fail" in args:
    print("no key", file=sys.stderr)
    sys.exit(3)
text = open(args[args.index("--input") + 1]).read()
if args[args.index("--input") + 1].endswith("malamar_health_input.md"):
    print("OK")
    sys.exit(0)
output = re.search(r"Write your response as JSON to: (\\S+)", text).group(1)
json.dump({{"actions": [{{"type": "comment", "content": "Done by the script"}},
                        {{"type": "change_status", "status": "in_review"}}]}}, open(output, "w"))
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "my-agent"
    log = tmp_path / "argv.log"
    path.write_text(SCRIPT.format(python=sys.executable, log=str(log)))
    path.chmod(0o755)
    return path, log


def _custom_agent(workspace, script, template, **extra):
    return agent_create(
        workspace=workspace,
        name="Scripted",
        instruction="Do it.",
        cli_type="custom",
        custom_binary=str(script),
        custom_args=template,
        **extra,
    )


@pytest.mark.django_db(transaction=True)
def test_a_custom_command_runs_a_task_to_in_review(script):
    path, log = script
    workspace = workspace_create(title="Custom")
    agent = _custom_agent(
        workspace,
        path,
        "--input {input_file} --cwd {cwd} --model={model} --out {output_file}",
        model="local-7b",
        custom_env={"MY_KEY": "secret"},
    )
    marked = CliHealth.objects.filter(cli_type=agent.health_key)
    marked.update(status=CliHealthStatus.SLOW, error="timed out")  # (a broken one is not run)
    task = _run_pass(task_create(workspace=workspace, summary="Script it"))
    assert marked.get().status == CliHealthStatus.HEALTHY  # a real run that worked clears it
    assert task.status == TaskStatus.IN_REVIEW
    assert [c.content for c in task.comments.all()] == ["Done by the script"]
    argv = [line for line in log.read_text().splitlines() if line]
    assert '"--model=local-7b"' in argv[0] and f"malamar_task_{task.id}" in argv[0]
    assert argv[0].endswith('"secret"]')  # the agent's environment variables reach it
    run = AgentRun.objects.get(task=task)
    assert (run.cli_type, run.model, run.status) == ("custom", "local-7b", "completed")


@pytest.mark.django_db(transaction=True)
def test_a_custom_command_may_print_its_result_on_stdout(script):
    path, _log = script
    workspace = workspace_create(title="Custom stdout")
    _custom_agent(workspace, path, "--stdout {prompt}", custom_output="stdout")
    task = _run_pass(task_create(workspace=workspace, summary="Print it"))
    assert task.status == TaskStatus.IN_REVIEW
    assert [c.content for c in task.comments.all()] == ["From stdout"]


@pytest.mark.django_db(transaction=True)
def test_a_failing_custom_command_is_an_error_comment(script):
    path, _log = script
    workspace = workspace_create(title="Custom failing")
    _custom_agent(workspace, path, "--fail {prompt}")
    task = _run_pass(task_create(workspace=workspace, summary="Fail"))
    assert task.status != TaskStatus.IN_REVIEW
    comment = task.comments.get()
    assert "no key (CLI exited with code 3)" in comment.content


@pytest.mark.django_db(transaction=True)
def test_the_custom_health_check_runs_the_template_with_a_real_prompt(script):
    path, log = script
    workspace = workspace_create(title="Custom health")
    agent = _custom_agent(workspace, path, "--input {input_file} --out {output_file}")
    key = f"custom:{agent.id}"
    assert CliHealth.objects.get(cli_type=key).refresh_requested_at is not None
    assert key in health.needs_full_check() and key in health.custom_keys()
    checks = health.HealthChecks()
    checks.request(full_for={key}, clis={key})  # as saving the agent asks: checked at once
    assert checks.join(timeout=60)
    row = CliHealth.objects.get(cli_type=key)
    assert (row.status, row.answer, row.refresh_requested_at) == ("healthy", "OK", None)
    assert "malamar_health_input.md" in log.read_text()
    agent_update(agent=agent, custom_args="--fail {prompt}")
    health.check_and_store(key, full=True)
    row = CliHealth.objects.get(cli_type=key)
    assert row.status == CliHealthStatus.UNHEALTHY and "no key" in row.error
    agent_update(agent=agent, cli_type="claude")
    assert not CliHealth.objects.filter(cli_type=key).exists()


@pytest.mark.django_db(transaction=True)
def test_a_chat_override_runs_without_the_agents_settings(fake_clis):
    workspace = workspace_create(title="Override")
    agent = agent_create(
        workspace=workspace, name="Helper", instruction="Help.", model="sonnet", extra_args=["--x"]
    )
    chat = chat_start(workspace=workspace, message="Hello", agent=agent)
    # Another CLI for this chat: the agent's claude model and flags would break it.
    ChatParticipant.objects.filter(chat=chat).update(cli_type="gemini")
    item = ChatQueueItem.objects.queued().get(chat=chat)
    assert ChatQueueItem.objects.claim(item.id)
    ChatReply(item, stop=threading.Event(), shutdown=threading.Event()).run()
    run = AgentRun.objects.get(chat=chat)
    assert (run.cli_type, run.status, run.model) == ("gemini", "completed", "gemini-2.5-flash")
    assert Task.objects.count() == 0


def test_stdout_mode_takes_the_last_json_object_of_what_was_printed():
    cli = cli_for("custom").configured(
        RunOptions(custom=CustomCommand(binary="x", args="{prompt}", output="stdout"))
    )
    printed = 'Thinking {not json}\n{"actions": [\n  {"type": "skip"}\n]}\nTokens: 2.3k sent\n'
    assert cli.read_stdout(printed).structured == {"actions": [{"type": "skip"}]}
    assert cli.read_stdout("just words").error == "the command printed no JSON object on stdout"
    assert cli.read_stdout("").error == "the command printed nothing on stdout"
    deep = "[" * 5000 + "]" * 5000
    assert cli.read_stdout('{"a": ' + deep + "}").error is not None
    file_mode = cli_for("custom")  # unconfigured: the output file is the answer
    assert file_mode.read_stdout('{"actions": []}').structured is None


def test_a_custom_commands_environment_comes_back_masked_and_stays(api, client, workspace):
    body = {
        "name": "Mine",
        "instruction": "x",
        "cli_type": "custom",
        "custom_binary": "qwen",
        "custom_args": "{prompt} --yolo",
        "custom_env": {"DASHSCOPE_API_KEY": "sk-1234567890abcdef", "MODE": "fast"},
    }
    created = api.post(f"/api/workspaces/{workspace.id}/agents", body).json()
    assert created["custom_env"] == {"DASHSCOPE_API_KEY": "••••cdef", "MODE": "••••"}
    shown = created["custom_env"]
    api.put(f"/api/agents/{created['id']}", {"custom_env": {**shown, "MODE": "slow"}})
    agent = Agent.objects.get(id=created["id"])
    assert agent.custom_env == {"DASHSCOPE_API_KEY": "sk-1234567890abcdef", "MODE": "slow"}
    edit = html(hx(client, "get", f"/agents/{agent.id}/edit/"))
    assert "sk-1234567890abcdef" not in edit and "DASHSCOPE_API_KEY=••••cdef" in edit
    data = {
        "name": "Mine",
        "instruction": "x",
        "cli_type": "custom",
        "custom_binary": "qwen",
        "custom_args": "{prompt} --yolo",
        "custom_output": "file",
        "custom_env": "DASHSCOPE_API_KEY=••••cdef\nMODE=slow",
    }
    hx(client, "post", f"/agents/{agent.id}/edit/", data)
    agent.refresh_from_db()
    assert agent.custom_env["DASHSCOPE_API_KEY"] == "sk-1234567890abcdef"


CHAT_SCRIPT = """#!{python}
import json
print("Working on it")
print(json.dumps({{"message": "Hi from the script", "actions": []}}, indent=2))
print("tokens: 12")
"""


@pytest.mark.django_db(transaction=True)
def test_a_custom_command_agent_answers_in_a_chat(tmp_path):
    path = tmp_path / "chatty"
    path.write_text(CHAT_SCRIPT.format(python=sys.executable))
    path.chmod(0o755)
    workspace = workspace_create(title="Custom chat")
    agent = _custom_agent(workspace, path, "{prompt}", custom_output="stdout")
    chat = chat_start(workspace=workspace, message="Hello", agent=agent)
    item = ChatQueueItem.objects.queued().get(chat=chat)
    assert ChatQueueItem.objects.claim(item.id)
    ChatReply(item, stop=threading.Event(), shutdown=threading.Event()).run()
    reply = chat.messages.filter(role="agent").get()
    assert reply.message == "Hi from the script"
    assert AgentRun.objects.get(chat=chat).cli_type == "custom"


@pytest.mark.django_db(transaction=True)
def test_an_extra_argument_the_cli_refuses_is_named_in_the_error(fake_clis):
    workspace = workspace_create(title="Unknown flag")
    agent_create(workspace=workspace, name="A", instruction="Skip.", extra_args=["--no-such-flag"])
    task = _run_pass(task_create(workspace=workspace, summary="Flag"))
    error = task.comments.get().content
    assert "unknown option '--no-such-flag'" in error
    assert "The agent's extra argument '--no-such-flag' may be the cause" in error


# The agent dialog and PUT /api/agents/:id refuse the same values and store nothing.
AGENT_SAME_RULES = [
    ("model", "m" * 201, "m" * 201),
    ("reasoning_effort", "huge", "huge"),
    ("fallback_cli_type", "claude", "claude"),  # the agent's own CLI
    ("extra_args", "--permission-mode\nplan", ["--permission-mode", "plan"]),
    ("custom_args", "-m {file}", "-m {file}"),
]


@pytest.mark.parametrize(("field", "form_value", "api_value"), AGENT_SAME_RULES)
def test_the_agent_api_refuses_what_the_dialog_refuses(
    client, api, workspace, field, form_value, api_value
):
    from django.forms.models import model_to_dict

    custom = field.startswith("custom_")
    agent = agent_create(
        workspace=workspace,
        name="Coder",
        instruction="Code.",
        cli_type="custom" if custom else "claude",
        **({"custom_binary": "aider", "custom_args": "-m {prompt}"} if custom else {}),
    )
    before = model_to_dict(Agent.objects.get(id=agent.id))
    data = {**AgentForm.initial_for(agent), field: form_value}
    data = {key: value for key, value in data.items() if value is not None}
    page = html(hx(client, "post", f"/agents/{agent.id}/edit/", data))
    assert parse(page).find("field--invalid") is not None, page
    response = api.put(f"/api/agents/{agent.id}", {field: api_value})
    assert response.status_code == 400, response.content
    assert model_to_dict(Agent.objects.get(id=agent.id)) == before
