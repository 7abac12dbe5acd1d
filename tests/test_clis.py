"""The CLI contract: one class per CLI, each implementing all of `runner.clis.base.Cli`, and one
registry that is the only place listing them."""

import json
import re
import tomllib
from pathlib import Path

import pytest
from django.utils import timezone

from agents.models import AGENT_CLI_CHOICES, CUSTOM_CLI, CliType
from runner.clis import CLIS, cli_for, gemini, opencode
from runner.clis.base import (
    HEALTH_PROMPT,
    Cli,
    Command,
    CustomCommand,
    McpServer,
    McpSetup,
    StdoutResult,
    config_with_server,
)
from runner.clis.custom import Custom
from runner.streams import parse_line
from runner.worker import health
from runner.worker.execution import interpret
from runner.worker.process import ProcessResult
from tests.conftest import cli_invocation

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = next(
    (
        folder / "shared" / "cli-samples"
        for folder in Path(__file__).resolve().parents
        if (folder / "shared" / "cli-samples").is_dir()
    ),
    Path(__file__).resolve().parent / "fixtures" / "cli-samples",
)
REQUIRED = {"command", "health_command", "stream_parser", "health_answer"}
DEFAULTED = {"read_stdout", "explain"}  # "nothing to say" unless a CLI knows better


def test_the_contract_names_everything_a_cli_provides():
    assert Cli.__abstractmethods__ == REQUIRED
    assert all(callable(getattr(Cli, member)) for member in DEFAULTED)
    assert set(Cli.__annotations__) == {"name", "label", "stderr_noise"}


def test_a_cli_that_reads_and_explains_nothing_writes_nothing_for_it(tmp_path):
    class Quiet(Cli):
        name, label = "quiet", "Quiet"

        def command(self, invocation):
            return Command([invocation.binary])

        def health_command(self, binary):
            return Command([binary])

        def stream_parser(self):
            return None

        def health_answer(self, stdout):
            return stdout

    quiet = Quiet()
    assert quiet.stderr_noise == ()
    assert quiet.read_stdout('{"type": "result", "is_error": true}') == StdoutResult()
    assert quiet.explain("root dangerously-skip-permissions") == ""


def test_a_cli_missing_part_of_the_contract_cannot_exist():
    class Partial(Cli):
        name, label, stderr_noise = "partial", "Partial", ()

        def command(self, invocation):
            return Command([invocation.binary])

    with pytest.raises(TypeError, match="abstract"):
        Partial()


def test_a_cli_missing_a_class_attribute_cannot_exist():
    with pytest.raises(TypeError, match="does not define label"):

        class Unnamed(Cli):
            name = "unnamed"


def test_the_registry_holds_one_of_each_cli_type():
    installed = [CliType.CLAUDE, CliType.GEMINI, CliType.CODEX, CliType.OPENCODE]
    assert list(CLIS) == [*installed, CUSTOM_CLI]  # the four installed CLIs + custom command
    assert set(CLIS) == {value for value, _label in AGENT_CLI_CHOICES}
    for cli_type, cli in CLIS.items():
        assert cli_for(cli_type) is cli and cli.name == cli_type
        assert cli.label == dict(AGENT_CLI_CHOICES)[cli_type]
    with pytest.raises(KeyError):
        cli_for("bash")


def test_every_cli_class_is_registered():
    defined = {cls for cls in Cli.__subclasses__() if cls.__module__.startswith("runner.clis.")}
    assert {type(cli) for cli in CLIS.values()} == defined


def test_only_the_registry_imports_a_cli_module():
    """Adding a CLI touches its module and the registry: nothing else names a CLI module."""
    one_cli = re.compile(r"runner[./]clis[./](?!base\b|__init__\b)\w+")
    allowed = {ROOT / "runner" / "clis" / "__init__.py", Path(__file__).resolve()}
    # Source folders only: not build/ and dist/, the wheel's copies (tests/test_package.py
    # builds it in the checkout, maybe at the same time in `make test`'s other process).
    folders = [
        d
        for d in ROOT.iterdir()
        if d.is_dir() and not d.name.startswith((".", "node")) and d.name not in ("build", "dist")
    ]
    found = [
        str(path.relative_to(ROOT))
        for folder in folders
        for path in folder.rglob("*.py")
        if path not in allowed and path.parent != ROOT / "runner" / "clis"
        if one_cli.search(path.read_text())
    ]
    assert found == []


@pytest.mark.parametrize("cli", CLIS.values(), ids=list(CLIS))
def test_every_cli_implements_the_whole_contract(cli, tmp_path):
    assert isinstance(cli.stderr_noise, tuple)
    assert all(isinstance(prefix, str) for prefix in cli.stderr_noise)
    run = cli.command(cli_invocation(tmp_path))
    assert isinstance(run, Command) and run.argv[0] == "/bin/cli"
    assert all(isinstance(arg, str) for arg in run.argv)
    check = cli.health_command("/bin/cli")
    assert isinstance(check, Command) and check.argv[0] == "/bin/cli"
    assert HEALTH_PROMPT in check.argv or check.stdin == HEALTH_PROMPT.encode()
    first, second = cli.stream_parser(), cli.stream_parser()
    assert first is not second  # parsers keep per-run state
    assert first.parse({"type": "nothing-known"}) == []
    assert cli.read_stdout("") == StdoutResult()
    assert cli.health_answer("OK\n") == "OK"
    assert cli.explain("") == ""


def test_health_commands_as_measured():
    """Streamed output, as a run's: the check's time limit counts from the first event."""
    assert cli_for("claude").health_command("c").argv == [
        "c",
        "-p",
        HEALTH_PROMPT,
        "--dangerously-skip-permissions",
        "--output-format",
        "stream-json",
        "--verbose",
    ]
    assert cli_for("gemini").health_command("g").argv == [
        "g",
        "-p",
        HEALTH_PROMPT,
        "--yolo",
        "--skip-trust",
        "-o",
        "stream-json",
    ]
    codex = cli_for("codex").health_command("x")
    assert codex.argv == [
        "x",
        "exec",
        "--dangerously-bypass-approvals-and-sandbox",
        "--skip-git-repo-check",
        "--json",
        HEALTH_PROMPT,
    ]
    assert codex.stdin is None
    opencode = cli_for("opencode").health_command("o")
    assert opencode.argv == [
        "o",
        *["run", "--auto", "--format", "json", "--print-logs", "--log-level", "WARN"],
    ]
    assert opencode.stdin == HEALTH_PROMPT.encode()


@pytest.mark.parametrize(
    ("cli", "sample", "answer"),
    [
        ("claude", "claude_json_401.json", "Invalid API key · Fix external API key"),
        ("claude", "claude_stream_write.jsonl", "FAKE_DONE: the file has been written."),
        ("gemini", "gemini_json_write.json", "FAKE_DONE: the file has been written."),
        ("gemini", "gemini_stream_write.jsonl", "FAKE_DONE: the file has been written."),
        ("codex", "codex_exec_json_cmd.jsonl", "FAKE_DONE: command executed."),
        (
            "opencode",
            "opencode_json_write.jsonl",
            "I will write the file now.FAKE_DONE: the file has been written.",
        ),
    ],
)
def test_health_answers_from_recorded_output(cli, sample, answer):
    path = SAMPLES / sample
    if not path.exists():
        pytest.skip(f"no recorded sample {sample}")
    assert cli_for(cli).health_answer(path.read_text()) == answer


def test_stderr_noise_is_left_out_of_run_and_health_errors(tmp_path):
    failed = ProcessResult(exit_code=1, stderr="YOLO mode is enabled. All tools approved.\nboom")
    out = tmp_path / "out.json"
    assert interpret("gemini", failed, out).error == "boom (CLI exited with code 1)"
    assert health._failure("gemini", failed) == "boom (CLI exited with code 1)"
    noisy = interpret("claude", failed, out).error
    assert noisy.startswith("YOLO mode is enabled.")


def test_health_failures_explain_known_traps():
    stderr = "--dangerously-skip-permissions cannot be used with root/sudo privileges"
    error = health._failure("claude", ProcessResult(exit_code=1, stderr=stderr))
    assert error.startswith("--dangerously-skip-permissions cannot be used with root/sudo")
    assert "(CLI exited with code 1)" in error and "IS_SANDBOX=1" in error


# --- MCP servers for one run (runner/clis/*.mcp_setup) -----------------------------------------

SERVER = McpServer(
    name="malamar",
    command="/opt/py thon/bin/python",
    args=("-m", "malamar_site.cli", "mcp", "--workspace", 'ab"c\\d'),
    env=(("MALAMAR_DATA_DIR", "/data/ma lamar"),),
)


def test_claude_gets_a_mcp_config_file_of_its_own(tmp_path):
    config = tmp_path / "run_mcp.json"
    setup = cli_for("claude").mcp_setup(SERVER, env={}, config_path=config)
    assert setup.args == ("--mcp-config", str(config))
    assert setup.env == (("MCP_CONNECTION_NONBLOCKING", "false"),)  # connect before turn 1
    [(path, text)] = setup.files
    assert path == config
    assert json.loads(text) == {
        "mcpServers": {
            "malamar": {
                "type": "stdio",
                "command": SERVER.command,
                "args": list(SERVER.args),
                "env": {"MALAMAR_DATA_DIR": "/data/ma lamar"},
            }
        }
    }


def test_gemini_gets_its_own_system_settings_keeping_the_administrators(tmp_path):
    admin = tmp_path / "system.json"
    admin.write_text(json.dumps({"ui": {"theme": "x"}, "mcpServers": {"corp": {"command": "c"}}}))
    config = tmp_path / "run_mcp.json"
    env = {"GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(admin)}
    setup = cli_for("gemini").mcp_setup(SERVER, env=env, config_path=config)
    assert setup.args == ()
    assert setup.env == (("GEMINI_CLI_SYSTEM_SETTINGS_PATH", str(config)),)
    settings = json.loads(dict(setup.files)[config])
    assert settings["ui"] == {"theme": "x"}
    assert settings["mcpServers"]["corp"] == {"command": "c"}
    assert settings["mcpServers"]["malamar"]["args"] == list(SERVER.args)
    # No readable system settings (the usual case): only the server.
    alone = cli_for("gemini").mcp_setup(
        SERVER, env={"GEMINI_CLI_SYSTEM_SETTINGS_PATH": str(tmp_path / "none")}, config_path=config
    )
    assert list(json.loads(dict(alone.files)[config])) == ["mcpServers"]


def test_codex_gets_config_overrides_in_toml(tmp_path):
    setup = cli_for("codex").mcp_setup(SERVER, env={}, config_path=tmp_path / "unused")
    assert setup.env == () and setup.files == ()
    flags, values = setup.args[0::2], setup.args[1::2]
    assert set(flags) == {"-c"}
    parsed = tomllib.loads("\n".join(values))["mcp_servers"]["malamar"]
    assert parsed == {
        "command": SERVER.command,
        "args": list(SERVER.args),
        "env": {"MALAMAR_DATA_DIR": "/data/ma lamar"},
        "required": True,  # exec waits for it (and fails without it) before its first request
        "startup_timeout_sec": 120,
    }
    # Before the prompt (the last argument), after Malamar's own options.
    codex = cli_invocation(tmp_path, binary="codex", prompt="PROMPT", mcp_args=setup.args)
    argv = cli_for("codex").command(codex).argv
    assert argv[-1] == "PROMPT" and argv[-1 - len(setup.args) : -1] == list(setup.args)


def test_opencode_gets_inline_config_on_top_of_the_users(tmp_path):
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps({"model": "a/b", "mcp": {"mine": {"x": 1}}})}
    setup = cli_for("opencode").mcp_setup(SERVER, env=env, config_path=tmp_path / "unused")
    assert setup.args == () and setup.files == ()
    [(name, value)] = setup.env
    config = json.loads(value)
    assert name == "OPENCODE_CONFIG_CONTENT" and config["model"] == "a/b"
    assert config["mcp"]["mine"] == {"x": 1}
    assert config["mcp"]["malamar"] == {
        "type": "local",
        "command": [SERVER.command, *SERVER.args],
        "environment": {"MALAMAR_DATA_DIR": "/data/ma lamar"},
        "enabled": True,
    }


@pytest.mark.parametrize(
    ("users", "expected"),
    [
        (None, {"mcp": {"malamar": {"x": 1}}}),
        ([1, 2], {"mcp": {"malamar": {"x": 1}}}),
        ({"mcp": "broken", "model": "m"}, {"mcp": {"malamar": {"x": 1}}, "model": "m"}),
        ({"mcp": {"mine": {}, "malamar": "old"}}, {"mcp": {"mine": {}, "malamar": {"x": 1}}}),
    ],
)
def test_a_users_configuration_of_any_shape_gets_the_server(users, expected):
    """Not an object (or its servers not one): replaced; the user's own servers are kept."""
    assert config_with_server(users, "mcp", "malamar", {"x": 1}) == expected


def test_a_custom_command_gets_no_mcp_server(tmp_path):
    setup = cli_for(CUSTOM_CLI).mcp_setup(SERVER, env={}, config_path=tmp_path / "x")
    assert setup == McpSetup()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


EVERY_CLI = [*CLIS.values(), Custom(CustomCommand(binary="x", output="stdout"))]


@pytest.mark.parametrize(
    "cli",
    EVERY_CLI,
    ids=lambda cli: f"{cli.name}-{cli.custom.output}" if isinstance(cli, Custom) else cli.name,
)
def test_every_reader_of_a_clis_output_survives_deep_nesting(cli):
    """Every CLI class reads its stdout/stderr in several places (the result, a usage limit,
    the health check's answer): 100,000 levels of nesting is a line that is not JSON there,
    never a RecursionError (OpenCode's health answer took the check down: "Health check error")."""
    deep = nested(100_000)
    lines = [
        deep,
        '{"type": "text", "part": {"text": ' + deep + "}}",
        '{"type": "result", "result": ' + deep + "}",
        '{"response": ' + deep + "}",
    ]
    for stdout in lines:
        assert isinstance(cli.health_answer(stdout), str)
        cli.read_stdout(stdout)
        cli.usage_limit(stdout=stdout, stderr=stdout, now=timezone.now())
        parse_line(cli.stream_parser(), stdout)


def test_deeply_nested_configuration_the_mcp_setup_reads_is_ignored(tmp_path):
    """The CLI configuration a run's MCP setup keeps (Gemini's system settings, OpenCode's
    inline configuration): nested too deeply, it is no configuration, not a crashed run."""
    deep = '{"a": ' + nested(100_000) + "}"
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(deep)
    assert gemini.system_settings({gemini.SYSTEM_SETTINGS_ENV: str(settings_file)}) == {}
    server = McpServer(name="malamar", command="malamar", args=("mcp",))
    env = {opencode.CONFIG_CONTENT_ENV: deep}
    setup = CLIS["opencode"].mcp_setup(server, env=env, config_path=tmp_path / "c")
    assert json.loads(dict(setup.env)[opencode.CONFIG_CONTENT_ENV])["mcp"]["malamar"]
