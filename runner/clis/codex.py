"""Codex CLI: `codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check --json
--output-schema SCHEMA_FILE -o OUTPUT_FILE PROMPT`; Codex writes its final, schema-constrained
message to OUTPUT_FILE itself. Standard input must be closed (an open pipe hangs it)."""

import json
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from agents.models import CliType
from runner.clis.base import (
    HEALTH_PROMPT,
    Cli,
    Command,
    Invocation,
    McpServer,
    McpSetup,
    error_message,
    json_lines,
    not_this_cli,
)
from runner.limits import Limit, first_limit
from runner.streams import (
    TEXT_CHARS,
    StreamItem,
    StreamParser,
    Trace,
    Usage,
    command_result,
    plan_text,
    tool_trace,
    trim,
)

# "You've hit your usage limit. … try again at Sep 20th, 2026 4:00 PM." (or "in 2 days 17 hours"),
# "Quota exceeded. Check your plan and billing details.", the API's `usage_limit_reached`, and a
# final 429 after Codex's own retries (tests/fixtures/limits/codex_*).
LIMIT_TEXT = re.compile(
    r"hit your usage limit|usage_limit_reached|quota exceeded|insufficient_quota|"
    r"status:? 429|\b429 Too Many Requests",
    re.I,
)

# A run that cannot work until the user acts (DESIGN "Retries"): its login refused (the API's
# 401/403 as codex 0.169.0 relays it: "unexpected status 401 Unauthorized: …"), or a model the
# API does not know ("The requested model 'x' does not exist.").
AUTH_REFUSED = re.compile(
    r"\b40[13] (?:Unauthorized|Forbidden)|invalid_api_key|Incorrect API key|Not logged in|"
    r"refresh token|codex login",
    re.I,
)
UNKNOWN_MODEL = re.compile(
    r"model \S+ does not exist|model_not_found|model is not supported|unsupported model", re.I
)

# How long codex exec waits for Malamar's MCP server to answer `initialize` and `tools/list`
# (its default is 10 s; `malamar mcp` lists its tools once Django is loaded, 2-3 CPU-seconds).
MCP_STARTUP_TIMEOUT_SECONDS = 120

_EXEC = ["exec", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"]
# Config keys (`-c key=value`) that have a field of their own or would undo the contract.
_RESERVED_CONFIG = ("model", "model_reasoning_effort", "sandbox_mode", "approval_policy")


class Codex(Cli):
    name = CliType.CODEX.value
    label = str(CliType.CODEX.label)
    # Printed on stderr by every run that closes stdin (as Malamar's do); never an error.
    stderr_noise = ("Reading additional input from stdin",)
    version_pattern = r"codex-cli \d+\.\d+"  # "codex-cli 0.169.0"
    event_types = frozenset(
        {
            "thread.started",
            "turn.started",
            "turn.completed",
            "turn.failed",
            "item.started",
            "item.updated",
            "item.completed",
            "error",
        }
    )
    model_flag = "-m"
    model_hint = "an OpenAI model name (or one of your config's providers)"
    model_suggestions = ("gpt-5-codex", "gpt-5", "o3")
    efforts = ("minimal", "low", "medium", "high")
    reserved_options = (
        "--json",
        "-o",
        "--output-last-message",
        "--output-schema",
        "-s",
        "--sandbox",
        "-a",
        "--ask-for-approval",
        "--approve-for-me",
        "--full-auto",
        "-m",
        "--model",
        "-C",
        "--cd",
        "--worktree",
    )

    def effort_args(self, effort: str) -> list[str]:
        return ["-c", f"model_reasoning_effort={effort}"]

    def reserved_option(self, arg: str) -> str | None:
        # `-c key=value` may set any config key: the keys with a meaning here are reserved,
        # whether the value comes as the next argument or glued on (`-ckey=…`, `--config=…`).
        setting = arg.removeprefix("--config=").removeprefix("-c")
        key = setting.split("=", 1)[0].strip()
        if "=" in setting and key in _RESERVED_CONFIG:
            return f"-c {key}=…"
        return super().reserved_option(arg)

    def command(self, invocation: Invocation) -> Command:
        # -o and --output-schema go together: -o alone overwrites the file with plain chat text.
        # The agent's options come before the prompt (a positional argument).
        return Command(
            [
                invocation.binary,
                *_EXEC,
                "--json",
                "--output-schema",
                str(invocation.schema_path),
                "-o",
                str(invocation.output_path),
                *invocation.mcp_args,
                *self.option_args(invocation.options),
                invocation.prompt,
            ]
        )

    def mcp_setup(
        self, server: McpServer, *, env: Mapping[str, str], config_path: Path
    ) -> McpSetup:
        """`-c mcp_servers.NAME.KEY=VALUE` overrides (values in TOML): Codex has no flag for a
        server file, and the overrides leave $CODEX_HOME/config.toml alone. Codex starts MCP
        servers with a minimal environment, so theirs is given in full. `required`: `codex
        exec` waits for the server before its first request (it starts without it otherwise)
        and fails if it cannot start; `startup_timeout_sec` (default 10 s, for `initialize`
        and the first `tools/list`) gives a busy machine time to load the tools."""
        key = f"mcp_servers.{server.name}"
        settings = {
            "command": toml_value(server.command),
            "args": toml_value(list(server.args)),
            "env": toml_table(dict(server.env)),
            "required": "true",
            "startup_timeout_sec": str(MCP_STARTUP_TIMEOUT_SECONDS),
        }
        args: list[str] = []
        for name, value in settings.items():
            args += ["-c", f"{key}.{name}={value}"]
        return McpSetup(args=tuple(args))

    def health_command(self, binary: str) -> Command:
        """Streamed (`--json`), as a run is: `thread.started` is its first output, from which
        the check's time limit counts."""
        return Command([binary, *_EXEC, "--json", HEALTH_PROMPT])

    def stream_parser(self) -> StreamParser:
        return CodexStream()

    def usage_limit(self, *, stdout: str, stderr: str, now: datetime) -> Limit | None:
        texts = []
        for event in json_lines(stdout):
            if event.get("type") == "turn.failed":
                texts.append(error_message(event.get("error")))
            elif event.get("type") == "error" and not str(event.get("message", "")).startswith(
                "Reconnecting"  # Codex retries these itself; only the final word counts
            ):
                texts.append(str(event.get("message") or ""))
        texts += [line for line in stderr.splitlines() if line.startswith("ERROR")]
        return first_limit(texts, LIMIT_TEXT, now)

    def health_answer(self, stdout: str) -> str:
        """With `--json`, the text of its `agent_message` items; without, codex prints only its
        final message on stdout (the banner goes to stderr)."""
        events = [event for event in json_lines(stdout) if self.is_own_event(event)]
        if not events:
            return stdout.strip()
        said = [
            str(item.get("text") or "")
            for event in events
            if event.get("type") == "item.completed"
            and isinstance(item := event.get("item"), dict)
            and item.get("type") == "agent_message"
        ]
        return "\n".join(said).strip()

    def error_message(self, *, stdout: str, stderr: str) -> str:
        """Its stream's last `turn.failed` error, else its last final `error` event (not one of
        the "Reconnecting…" it retries itself), else stderr."""
        failed, errors = "", ""
        for event in json_lines(stdout):
            if event.get("type") == "turn.failed":
                failed = error_message(event.get("error")) or failed
            elif event.get("type") == "error":
                message = str(event.get("message") or "")
                if message and not message.startswith("Reconnecting"):
                    errors = message
        said = (failed or errors).strip()
        return said or super().error_message(stdout=stdout, stderr=stderr)

    def cannot_run_reason(self, result) -> str | None:
        if result.exit_code not in (0, None):
            said = self.error_message(stdout=result.stdout, stderr=result.stderr)
            if AUTH_REFUSED.search(said):
                return f"logged out, or its login was refused: {said}"
            if UNKNOWN_MODEL.search(said):
                return f"unknown model: {said}"
        return not_this_cli(self, result)


def toml_value(value: str | list[str]) -> str:
    """A string or a list of strings in TOML: JSON's escaped strings are TOML basic strings."""
    return json.dumps(value, ensure_ascii=True)


def toml_table(values: dict[str, str]) -> str:
    """An inline TOML table of strings: `{"KEY" = "value", …}`."""
    return "{" + ", ".join(f"{toml_value(k)} = {toml_value(v)}" for k, v in values.items()) + "}"


class CodexStream:
    """`exec --json` events."""

    def parse(self, event: dict) -> list[StreamItem]:
        kind = event.get("type")
        if kind == "thread.started":
            return [Trace("status", "Started (Codex)")]
        if kind in ("item.started", "item.completed"):
            return self._item(event.get("item") or {}, done=kind == "item.completed")
        if kind == "turn.completed":
            usage = event.get("usage") or {}
            return [
                Usage(
                    input_tokens=int(usage.get("input_tokens") or 0),
                    output_tokens=int(usage.get("output_tokens") or 0)
                    + int(usage.get("reasoning_output_tokens") or 0),
                )
            ]
        if kind == "turn.failed":
            return [
                Trace("error", trim((event.get("error") or {}).get("message") or "Turn failed"))
            ]
        if kind == "error":
            message = event.get("message") or "Codex reported an error"
            kind = "status" if message.startswith("Reconnecting") else "error"
            return [Trace(kind, trim(message))]
        return []

    def _item(self, item: dict, *, done: bool) -> list[StreamItem]:
        kind = item.get("type")
        if kind == "command_execution":
            if not done:
                return [tool_trace("command", {"command": item.get("command", "")})]
            return [command_result(item.get("aggregated_output"), item.get("exit_code"))]
        if not done:
            return []
        if kind == "agent_message" and (item.get("text") or "").strip():
            return [Trace("text", trim(item["text"], TEXT_CHARS))]
        if kind == "reasoning" and (item.get("text") or "").strip():
            return [Trace("thought", trim(item["text"], TEXT_CHARS))]
        if kind == "file_change":
            verbs = {"add": ("file-create", "Writing"), "delete": ("file-delete", "Deleting")}
            traces: list[StreamItem] = []
            for change in item.get("changes") or []:
                action_kind, verb = verbs.get(change.get("kind"), ("file-edit", "Editing"))
                path = change.get("path", "")
                traces.append(Trace("action", f"{verb} {path}", action_kind, {"path": path}))
            return traces
        if kind == "todo_list":
            return [Trace("plan", plan_text({"items": item.get("items")}))]
        if kind == "web_search":
            return [Trace("action", f"Searching {item.get('query', '')}".strip(), "search")]
        if kind == "mcp_tool_call":
            tool = f"{item.get('server', '')}.{item.get('tool', '')}"
            return [Trace("action", f"Using {tool}", "generic", {"tool": tool})]
        if kind == "error":
            return [Trace("status", trim(item.get("message") or ""))]
        return []
