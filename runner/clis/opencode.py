"""OpenCode: `opencode run --auto --format json` with the prompt on standard input.

An argv prompt containing spaces reaches the model wrapped in literal quotes, so the prompt goes
through stdin. There is no schema flag and no final result event: the answer is the file the
output instruction names.
"""

import json
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from agents.models import CliType
from core.storable import loads_storable
from runner.clis.base import (
    HEALTH_PROMPT,
    Cli,
    Command,
    Invocation,
    McpServer,
    McpSetup,
    config_with_server,
    json_lines,
    not_this_cli,
)
from runner.limits import Limit, first_limit, seconds_after
from runner.streams import (
    TEXT_CHARS,
    StreamItem,
    StreamParser,
    Trace,
    Usage,
    command_result,
    tool_trace,
    trim,
)

# An `APIError` event with statusCode 429 (the provider's rate limit or quota: `rate_limit_error`,
# `insufficient_quota`, "Rate limit exceeded. Please retry after a brief wait."), its
# `retry-after` header when the provider sent one (tests/fixtures/limits/opencode_*).
LIMIT_TEXT = re.compile(
    r"\b429\b|rate.?limit|insufficient_quota|exceeded your current quota|usage limit", re.I
)
# A run that cannot work until the user acts (DESIGN "Retries"): the provider refused its key
# (an `APIError` with statusCode 401/403, or its ProviderAuthError), or the model is unknown
# (opencode 1.18.33: "Model not found: provider/model." from ProviderModelNotFoundError).
AUTH_STATUS = (401, 403)
AUTH_ERRORS = ("ProviderAuthError",)
UNKNOWN_MODEL = re.compile(r"Model not found|ProviderModelNotFoundError")

# Inline configuration merged over every config file, the user's global one included.
CONFIG_CONTENT_ENV = "OPENCODE_CONFIG_CONTENT"

# `--print-logs --log-level WARN`: its warnings and errors on stderr instead of a log file, so
# a model request refused with a 429 and a `retry-after` is seen while OpenCode waits it out.
_RUN = ["run", "--auto", "--format", "json", "--print-logs", "--log-level", "WARN"]
# opencode 1.18.33 (session/retry.ts in its binary) honours a provider's `retry-after` (or
# `retry-after-ms`) up to 2^31-1 ms (~24.8 days), 5 times, and prints nothing meanwhile in
# `--format json`; each refused request is logged ("stream error", with the provider's error).
# A wait longer than this is a usage limit, not a pause to sit through.
LONGEST_SILENT_WAIT_SECONDS = 120
RATE_LIMITED = re.compile(r"statusCode\W{0,3}429|\b429\b|rate.?limit", re.I)
RETRY_AFTER = re.compile(r"retry-after(-ms)?\W{1,6}(\d+(?:\.\d+)?)", re.I)
PROVIDER_MESSAGE = re.compile(r"message\W{1,6}(?!stream error)([^\"\\]{8,300})", re.I)


class OpenCode(Cli):
    name = CliType.OPENCODE.value
    label = str(CliType.OPENCODE.label)
    version_pattern = r"\d+\.\d+\.\d+\S*$"  # "1.18.33"
    event_types = frozenset({"step_start", "step_finish", "text", "reasoning", "tool_use", "error"})
    model_flag = "-m"
    model_hint = "provider/model, as `opencode models` lists them"
    model_suggestions = (
        "anthropic/claude-sonnet-4-5",
        "openai/gpt-5",
        "google/gemini-2.5-pro",
        "opencode/grok-code",
    )
    # `--variant`: "model variant (provider-specific reasoning effort, e.g., high, max,
    # minimal)" in 1.18.33's `run --help`.
    efforts = ("minimal", "low", "medium", "high", "max")
    reserved_options = (
        "--format",
        "--auto",
        "-m",
        "--model",
        "--variant",
        "-i",
        "--interactive",
        "-c",
        "--continue",
        "-s",
        "--session",
        "--fork",
        "--command",
        "--attach",
        "--dir",
    )

    def effort_args(self, effort: str) -> list[str]:
        return ["--variant", effort]

    def command(self, invocation: Invocation) -> Command:
        argv = [invocation.binary, *_RUN, *self.option_args(invocation.options)]
        return Command(argv, stdin=invocation.prompt.encode())

    def mcp_setup(
        self, server: McpServer, *, env: Mapping[str, str], config_path: Path
    ) -> McpSetup:
        """OPENCODE_CONFIG_CONTENT with an `mcp` entry (on top of any inline configuration the
        user gave in the CLI's environment); their config files stay as they are."""
        try:
            config = loads_storable(env.get(CONFIG_CONTENT_ENV) or "{}")
        except ValueError:
            config = {}
        entry = {
            "type": "local",
            "command": [server.command, *server.args],
            "environment": dict(server.env),
            "enabled": True,
        }
        config = config_with_server(config, "mcp", server.name, entry)
        return McpSetup(env=((CONFIG_CONTENT_ENV, json.dumps(config)),))

    def health_command(self, binary: str) -> Command:
        return Command([binary, *_RUN], stdin=HEALTH_PROMPT.encode())

    def waits_out_a_limit(self, stderr_line: str, now: datetime) -> Limit | None:
        """A logged 429 whose `retry-after` is longer than LONGEST_SILENT_WAIT_SECONDS: OpenCode
        now sleeps that long without a word (CLIS.md); shorter waits it sits through itself."""
        after = RETRY_AFTER.search(stderr_line)
        if after is None or not RATE_LIMITED.search(stderr_line):
            return None
        seconds = float(after.group(2)) / (1000 if after.group(1) else 1)
        if seconds <= LONGEST_SILENT_WAIT_SECONDS:
            return None
        said = [m.strip() for m in PROVIDER_MESSAGE.findall(stderr_line) if m.strip()]
        waiting = f"OpenCode is waiting {seconds:g} s for the provider's rate limit (retry-after)"
        message = f"{said[-1]} ({waiting})" if said else waiting
        return Limit(message=message[:500], reset_at=seconds_after(seconds, now))

    def stream_parser(self) -> StreamParser:
        return OpenCodeStream()

    def usage_limit(self, *, stdout: str, stderr: str, now: datetime) -> Limit | None:
        for event in json_lines(stdout):
            error = event.get("error") if event.get("type") == "error" else None
            data = (error.get("data") or {}) if isinstance(error, dict) else {}
            if not isinstance(data, dict):
                continue
            text = f"{data.get('message') or ''} {data.get('responseBody') or ''}".strip()
            if data.get("statusCode") == 429 or LIMIT_TEXT.search(text):
                limit = first_limit([f"429 {text}"], LIMIT_TEXT, now)
                headers = data.get("responseHeaders")
                retry_after = headers.get("retry-after") if isinstance(headers, dict) else None
                after = seconds_after(retry_after, now)
                message = str(data.get("message") or text)[:500]
                return Limit(message=message, reset_at=after or limit.reset_at)
        return first_limit([stderr], LIMIT_TEXT, now)

    def error_message(self, *, stdout: str, stderr: str) -> str:
        """Its last `error` event's message, else stderr."""
        said = [error_text(error) for error in error_events(stdout)]
        said = [text for text in said if text]
        return said[-1] if said else super().error_message(stdout=stdout, stderr=stderr)

    def cannot_run_reason(self, result) -> str | None:
        errors = error_events(result.stdout)
        if result.exit_code not in (0, None):  # a session error makes it exit 1
            said = self.error_message(stdout=result.stdout, stderr=result.stderr)
            for error in errors:
                data = error.get("data") if isinstance(error.get("data"), dict) else {}
                if data.get("statusCode") in AUTH_STATUS or error.get("name") in AUTH_ERRORS:
                    return f"logged out, or its login was refused: {error_text(error)}"
                if UNKNOWN_MODEL.search(f"{error.get('name')} {error_text(error)}"):
                    return f"unknown model: {error_text(error)}"
            if UNKNOWN_MODEL.search(said):
                return f"unknown model: {said}"
        return not_this_cli(self, result)

    def health_answer(self, stdout: str) -> str:
        """`--format json` prints JSONL events: the answer is the text of its `text` events."""
        texts, events = [], 0
        for event in json_lines(stdout):  # (a line nested too deeply is no event)
            events += 1
            part = event.get("part")
            if event.get("type") == "text" and isinstance(part, dict):
                texts.append(str(part.get("text") or ""))
        return "".join(texts).strip() if events else stdout.strip()


def error_events(stdout: str) -> list[dict]:
    """The `error` objects of its `error` events, in order."""
    return [
        event["error"]
        for event in json_lines(stdout)
        if event.get("type") == "error" and isinstance(event.get("error"), dict)
    ]


def error_text(error: dict) -> str:
    """An error's message (its `data.message`), else its name."""
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    return str(data.get("message") or error.get("name") or "").strip()


class OpenCodeStream:
    """`run --format json` events."""

    def parse(self, event: dict) -> list[StreamItem]:
        kind = event.get("type")
        part = event.get("part") or {}
        if kind == "text" and (part.get("text") or "").strip():
            return [Trace("text", trim(part["text"], TEXT_CHARS))]
        if kind == "reasoning" and (part.get("text") or "").strip():
            return [Trace("thought", trim(part["text"], TEXT_CHARS))]
        if kind == "tool_use":
            state = part.get("state") or {}
            trace = tool_trace(part.get("tool", ""), state.get("input"))
            items: list[StreamItem] = [trace]
            if state.get("status") == "error":
                items.append(Trace("error", trim(state.get("error") or "Tool failed")))
            elif trace.action_kind == "command" and "output" in state:
                exit_code = (state.get("metadata") or {}).get("exit")
                items.append(command_result(state.get("output"), exit_code))
            return items
        if kind == "step_finish":
            tokens = part.get("tokens") or {}
            return [
                Usage(
                    input_tokens=int(tokens.get("input") or 0),
                    output_tokens=int(tokens.get("output") or 0)
                    + int(tokens.get("reasoning") or 0),
                    cost_usd=part.get("cost"),
                )
            ]
        if kind == "error":
            error = event.get("error") or {}
            message = (error.get("data") or {}).get("message") or error.get("name") or "Error"
            return [Trace("error", trim(message))]
        return []
