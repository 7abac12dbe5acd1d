"""What each CLI process really gets (issues 25 and 26), read from the fake CLIs' own log: the
task's folder as its working directory *and* its PWD whatever folder Malamar was started from
(OpenCode works in $PWD), a private TMPDIR in the data directory, and, with Malamar's tools, the
settings that make each CLI wait for the MCP server, in a private folder (never the system temp
folder, whose mode Gemini refuses)."""

import json
import os
import shlex
import signal
import stat
import threading
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.utils import timezone

from runner.clis import cli_for
from runner.schemas import task_schema
from runner.worker import execution
from runner.worker.execution import mcp_server_for
from tests.conftest import cli_invocation
from tests.stack import FAKES_BIN

CLIS = ("claude", "gemini", "codex", "opencode")
NO_SETTINGS = {"binary_path": "", "env": {}, "health_timeout_seconds": 90}


@pytest.fixture
def started_elsewhere(tmp_path, monkeypatch) -> Path:
    """Malamar as started from a checkout of the user's (its PWD), with the fakes on PATH and
    their log on; returns the log file."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PWD", str(checkout))
    monkeypatch.setenv("PATH", f"{FAKES_BIN}{os.pathsep}{os.environ['PATH']}")
    log = tmp_path / "fake.log"
    monkeypatch.setenv("MALAMAR_FAKE_LOG", str(log))
    return log


def run_agent(cli: str, folder: Path, directive: str, *, mcp=None) -> dict:
    """One agent step of `cli` in `folder` through execution.execute (the step every task pass
    and chat reply takes); returns what the fake CLI logged about its process."""
    folder.mkdir(exist_ok=True)
    output = folder.parent / f"out_{cli}.json"
    input_path = folder.parent / f"in_{cli}.md"
    input_path.write_text(
        f'You are the agent "Implementer".\n\n# Your Role\n\n{directive}\n\n# Task\n\n'
        f"## Description\n\nx\n\n# Output Instruction\n\nWrite your response as JSON to: {output}\n"
    )
    done = execution.execute(
        cli_type=cli,
        input_path=input_path,
        output_path=output,
        schema=task_schema(),
        schema_kind="task",
        cwd=folder,
        stop=threading.Event(),
        include_dirs=(str(folder.parent),),
        cli_conf=NO_SETTINGS,
        mcp=mcp,
    )
    assert done.error is None, done.error
    log = Path(os.environ["MALAMAR_FAKE_LOG"])
    return json.loads(log.read_text().splitlines()[-1])


def private(path: Path) -> bool:
    return stat.S_IMODE(path.stat().st_mode) == 0o700


@pytest.mark.parametrize("cli", CLIS)
def test_each_cli_works_in_the_tasks_folder_with_a_private_temp_folder(
    cli, tmp_path, started_elsewhere
):
    folder = tmp_path / "task"
    seen = run_agent(cli, folder, "@fake write hello.txt hi")
    assert seen["cwd"] == seen["env"]["PWD"] == str(folder)
    # OpenCode writes where $PWD points: the task's folder, never the user's checkout.
    assert (folder / "hello.txt").read_text() == "hi"
    assert not (tmp_path / "checkout" / "hello.txt").exists()
    temp = Path(seen["env"]["TMPDIR"])
    assert temp == Path(settings.DATA_DIR) / "tmp" and private(temp)


@pytest.mark.parametrize("cli", ("claude", "gemini", "codex"))
def test_with_malamars_tools_each_cli_waits_for_the_server(cli, tmp_path, started_elsewhere):
    server = mcp_server_for(SimpleNamespace(id="W1", mcp_tools_enabled=True))
    seen = run_agent(cli, tmp_path / "task", "@fake skip", mcp=server)
    run_config = Path(settings.DATA_DIR) / "run-config"
    if cli == "claude":
        assert seen["env"]["MCP_CONNECTION_NONBLOCKING"] == "false"
        config = Path(seen["argv"][seen["argv"].index("--mcp-config") + 1])
        assert config.parent == run_config and private(run_config)
    elif cli == "gemini":  # its system settings file: refused in a folder others may write
        config = Path(seen["env"]["GEMINI_CLI_SYSTEM_SETTINGS_PATH"])
        assert config.parent == run_config and private(run_config)
    else:
        assert "mcp_servers.malamar.required=true" in seen["argv"]
        assert "mcp_servers.malamar.startup_timeout_sec=120" in seen["argv"]
    assert not list(run_config.glob("*_mcp.json"))  # the run's files end with it


@pytest.mark.parametrize("cli", CLIS)
def test_without_malamars_tools_nothing_is_added(cli, tmp_path, started_elsewhere):
    seen = run_agent(cli, tmp_path / "task", "@fake skip")
    assert "MCP_CONNECTION_NONBLOCKING" not in seen["env"]
    assert "GEMINI_CLI_SYSTEM_SETTINGS_PATH" not in seen["env"]
    assert not any(arg.startswith("mcp_servers.") for arg in seen["argv"])


# --- OpenCode waits out a provider's retry-after silently ---------------------------------

# What opencode 1.18.33 logs (with --print-logs) for a model request refused with a 429: its LLM
# layer's `logError("stream error", {providerID, modelID, …, error})`. The fields are its
# source's; the exact line layout of its logger is inferred, not recorded from a real run.
RETRY_AFTER_LOG = (
    "ERROR 2026-11-24T12:00:00 +2ms service=llm providerID=anthropic "
    "modelID=claude-sonnet-4-5 session.id=ses_dfdd34a74ffecnCxFmMpXhm8T9 "
    'error={"name":"AI_APICallError","statusCode":429,"isRetryable":true,'
    '"responseHeaders":{"content-type":"application/json","retry-after":"86400"},'
    '"message":"This request would exceed your account\'s rate limit. Please try again later."}'
    " stream error"
)


def test_a_long_retry_after_is_a_usage_limit_and_a_short_one_is_waited_out():
    now = timezone.now()
    found = cli_for("opencode").waits_out_a_limit(RETRY_AFTER_LOG, now)
    assert found.reset_at == now + timedelta(days=1)
    assert found.message.startswith("This request would exceed your account's rate limit.")
    short = RETRY_AFTER_LOG.replace('"retry-after":"86400"', '"retry-after":"20"')
    assert cli_for("opencode").waits_out_a_limit(short, now) is None
    in_ms = RETRY_AFTER_LOG.replace('"retry-after":"86400"', '"retry-after-ms":"3600000"')
    assert cli_for("opencode").waits_out_a_limit(in_ms, now).reset_at == now + timedelta(hours=1)
    assert cli_for("opencode").waits_out_a_limit("INFO retry-after 9999 fine", now) is None


def test_an_opencode_run_waiting_out_a_plan_limit_is_stopped_as_a_usage_limit(
    tmp_path, started_elsewhere
):
    """OpenCode sleeps up to ~25 days on a provider's retry-after, five times, without a word
    on its JSON stream: the run is stopped as soon as its log says so, and pauses as a limit."""
    script = tmp_path / "opencode"
    script.write_text(
        "#!/bin/sh\n"
        f"cat > /dev/null\nprintf '%s\\n' {shlex.quote(RETRY_AFTER_LOG)} >&2\n"
        "sleep 30\nexit 1\n"  # the real one would sleep for a day here
    )
    script.chmod(0o755)
    folder = tmp_path / "task"
    folder.mkdir()
    done = execution.execute(
        cli_type="opencode",
        input_path=tmp_path / "in.md",
        output_path=tmp_path / "out.json",
        schema=task_schema(),
        schema_kind="task",
        cwd=folder,
        stop=threading.Event(),
        cli_conf={**NO_SETTINGS, "binary_path": str(script)},
    )
    assert done.limit is not None and done.limit.reset_at is not None
    assert done.error.startswith("CLI stopped: This request would exceed your account's")
    assert done.result.exit_code == -signal.SIGKILL  # stopped, not waited out (exit 1)
    assert "--print-logs" in cli_for("opencode").command(cli_invocation(tmp_path)).argv
