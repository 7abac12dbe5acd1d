"""Claude Code: `claude -p PROMPT --dangerously-skip-permissions --output-format stream-json
--verbose --json-schema SCHEMA`. The schema-conforming object comes back on stdout as
`structured_output`; `is_error` (not `subtype`) says whether the run failed."""

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
    StdoutResult,
    last_json_object,
    not_this_cli,
)
from runner.limits import Limit, first_limit
from runner.schemas import schema_json
from runner.streams import (
    TEXT_CHARS,
    Delta,
    ModelUsed,
    StreamItem,
    StreamParser,
    Trace,
    Usage,
    command_result,
    tool_trace,
    trim,
)

# "You've hit your session limit · resets 5:40pm (Europe/Berlin)" (2.x), "Claude AI usage limit
# reached|1749924000" (1.x), "Claude usage limit reached. Your limit will reset at 3pm (…)", and
# the API's `429 … rate_limit_error` (tests/fixtures/limits/claude_*).
LIMIT_TEXT = re.compile(
    r"hit your (?:\w+ )?limit|usage limit reached|rate_limit_error|\b429\b", re.I
)

# A run that cannot work until the user acts (DESIGN "Retries"), in Claude Code 2.1.197's words
# (from its binary): logged out, a refused key or token, a model it cannot use.
AUTH_REFUSED = re.compile(
    r"Not logged in|Invalid API key|OAuth token (?:has expired|revoked)|authentication_error|"
    r"Please run /login|claude auth login",
    re.I,
)
UNKNOWN_MODEL = re.compile(
    r"issue with the selected model|model_not_found|is not available on your .* deployment", re.I
)

ROOT_HINT = (
    " Claude Code refuses --dangerously-skip-permissions as root: add IS_SANDBOX=1 to its "
    "environment variables in Settings → CLIs."
)


class Claude(Cli):
    name = CliType.CLAUDE.value
    label = str(CliType.CLAUDE.label)
    version_pattern = r"\d+\.\d+\.\d+ \(Claude Code\)"  # "2.1.197 (Claude Code)"
    event_types = frozenset({"system", "assistant", "user", "result", "stream_event"})
    model_flag = "--model"
    model_hint = "an alias (opus, sonnet) or a full model name"
    model_suggestions = ("opus", "sonnet", "haiku")
    efforts = ("low", "medium", "high", "xhigh", "max")
    reserved_options = (
        "-p",
        "--print",
        "--output-format",
        "--input-format",
        "--json-schema",
        "--dangerously-skip-permissions",
        "--allow-dangerously-skip-permissions",
        "--permission-mode",
        "--model",
        "--effort",
        "-c",
        "--continue",
        "-r",
        "--resume",
        "-w",
        "--worktree",
        "--bg",
        "--background",
    )

    def effort_args(self, effort: str) -> list[str]:
        return ["--effort", effort]

    def command(self, invocation: Invocation) -> Command:
        return Command(
            [
                invocation.binary,
                "-p",
                invocation.prompt,
                "--dangerously-skip-permissions",
                # Streamed events for live activity; stream-json needs --verbose (else exit 1).
                "--output-format",
                "stream-json",
                "--verbose",
                # Before another option: --mcp-config takes every value up to the next one.
                *invocation.mcp_args,
                "--json-schema",
                schema_json(invocation.schema),
                *self.option_args(invocation.options),
            ]
        )

    def mcp_setup(
        self, server: McpServer, *, env: Mapping[str, str], config_path: Path
    ) -> McpSetup:
        """`--mcp-config FILE`: added to the user's own servers (no --strict-mcp-config).
        MCP_CONNECTION_NONBLOCKING=false: 2.1.197 connects servers in the background by
        default, so the first model requests went out without Malamar's tools; with it, the
        connection is made before the first request."""
        config = {"mcpServers": {server.name: {"type": "stdio", **server.stdio_entry()}}}
        return McpSetup(
            args=("--mcp-config", str(config_path)),
            env=(("MCP_CONNECTION_NONBLOCKING", "false"),),
            files=((config_path, json.dumps(config, indent=2)),),
        )

    def health_command(self, binary: str) -> Command:
        """Streamed, as a run is: its `system/init` event is its first output, from which the
        check's time limit counts (a loaded machine's start-up does not)."""
        return Command(
            [
                binary,
                "-p",
                HEALTH_PROMPT,
                "--dangerously-skip-permissions",
                "--output-format",
                "stream-json",
                "--verbose",
            ]
        )

    def stream_parser(self) -> StreamParser:
        return ClaudeStream()

    def read_stdout(self, stdout: str) -> StdoutResult:
        result = last_json_object(stdout)
        if not result or result.get("type") != "result":
            return StdoutResult()
        if result.get("is_error"):
            return StdoutResult(error=str(result.get("result") or "Claude Code reported an error"))
        structured = result.get("structured_output")
        return StdoutResult(structured=structured if isinstance(structured, dict) else None)

    def health_answer(self, stdout: str) -> str:
        """The final `result` event (the last line, also of `--output-format json`) holds the
        answer as its `result`."""
        result = last_json_object(stdout)
        if not result or result.get("type") != "result":
            return stdout.strip()
        return str(result.get("result") or "").strip()

    def usage_limit(self, *, stdout: str, stderr: str, now: datetime) -> Limit | None:
        texts = []
        result = last_json_object(stdout)
        if result and result.get("type") == "result" and result.get("is_error"):
            text = str(result.get("result") or "")
            if result.get("api_error_status") == 429 and not LIMIT_TEXT.search(text):
                text = f"429 rate_limit_error: {text}"
            texts.append(text)
        texts.append(stderr)
        return first_limit(texts, LIMIT_TEXT, now)

    def explain(self, stderr: str) -> str:
        return ROOT_HINT if "root" in stderr and "dangerously-skip-permissions" in stderr else ""

    def error_message(self, *, stdout: str, stderr: str) -> str:
        """The result event's text when it reports an error, else stderr."""
        result = last_json_object(stdout)
        if result and result.get("type") == "result" and result.get("is_error"):
            return str(result.get("result") or "").strip() or "Claude Code reported an error"
        return super().error_message(stdout=stdout, stderr=stderr)

    def cannot_run_reason(self, result) -> str | None:
        if result.exit_code != 0 or self.read_stdout(result.stdout).error:
            said = self.error_message(stdout=result.stdout, stderr=result.stderr)
            status = (last_json_object(result.stdout) or {}).get("api_error_status")
            if status in (401, 403) or AUTH_REFUSED.search(said):
                return f"logged out, or its login was refused: {said}"
            if UNKNOWN_MODEL.search(said):
                return f"unknown model: {said}"
        return not_this_cli(self, result)


class ClaudeStream:
    """`--output-format stream-json --verbose` events."""

    def __init__(self) -> None:
        self.commands: set[str | None] = set()  # ids of tool calls that ran a command
        self.cwd = ""

    def parse(self, event: dict) -> list[StreamItem]:
        kind = event.get("type")
        if kind == "system":
            return self._system(event)
        if kind == "assistant":
            return self._blocks((event.get("message") or {}).get("content") or [])
        if kind == "user":
            return self._results((event.get("message") or {}).get("content") or [])
        if kind == "stream_event":
            delta = (event.get("event") or {}).get("delta") or {}
            return [Delta(delta["text"])] if delta.get("type") == "text_delta" else []
        if kind == "result":
            usage = event.get("usage") or {}
            items: list[StreamItem] = [
                Usage(
                    input_tokens=sum(
                        int(usage.get(k) or 0)
                        for k in (
                            "input_tokens",
                            "cache_creation_input_tokens",
                            "cache_read_input_tokens",
                        )
                    ),
                    output_tokens=int(usage.get("output_tokens") or 0),
                    cost_usd=event.get("total_cost_usd"),
                    total=True,
                )
            ]
            if event.get("is_error"):
                items.append(
                    Trace("error", trim(event.get("result") or "Claude reported an error"))
                )
            return items
        return []

    def _system(self, event: dict) -> list[StreamItem]:
        if event.get("subtype") == "init":
            self.cwd = event.get("cwd") or ""
            model = event.get("model")
            started = Trace("status", f"Started ({model or 'Claude'})")
            return [started, ModelUsed(str(model))] if model else [started]
        if event.get("subtype") == "api_retry":
            attempt, most = event.get("attempt"), event.get("max_retries")
            return [Trace("status", f"Model API unavailable, retry {attempt}/{most}")]
        return []

    def _blocks(self, blocks: list) -> list[StreamItem]:
        items: list[StreamItem] = []
        for block in blocks:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text", "").strip():
                items.append(Trace("text", trim(block["text"], TEXT_CHARS)))
            elif block.get("type") == "thinking" and block.get("thinking", "").strip():
                items.append(Trace("thought", trim(block["thinking"], TEXT_CHARS)))
            elif block.get("type") == "tool_use":
                trace = tool_trace(block.get("name", ""), block.get("input"), self.cwd)
                if trace.action_kind == "command":
                    self.commands.add(block.get("id"))
                items.append(trace)
        return items

    def _results(self, blocks: list) -> list[StreamItem]:
        items: list[StreamItem] = []
        for block in blocks:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            if block.get("tool_use_id") not in self.commands:
                continue
            content = block.get("content")
            if isinstance(content, list):
                content = "\n".join(c.get("text", "") for c in content if isinstance(c, dict))
            items.append(command_result(content, failed=bool(block.get("is_error"))))
        return items
