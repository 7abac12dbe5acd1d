"""Gemini CLI: `gemini -p PROMPT --yolo --skip-trust --include-directories DIRS -o stream-json`.

No schema flag: the input file's output instruction carries the schema. Its file tools only
reach the working directory and `--include-directories`, so the temp folder is included.
"""

import json
import re
import sys
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
    error_message,
    json_document,
    json_lines,
    last_json_document,
    not_this_cli,
)
from runner.limits import Limit, first_limit
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

# "RESOURCE_EXHAUSTED" (429) with "Please retry in 37.5s.", "You have exhausted your capacity on
# this model. Your quota will reset after 4h28m20s.", "You exceeded your current quota", and its
# own TerminalQuotaError for a daily quota, "You have exhausted your daily quota on this model."
# (exit 173: 429 & 0xFF) (tests/fixtures/limits/gemini_*). A bare "quota exceeded" is not
# enough: Gemini's real quota errors always carry one of these.
LIMIT_TEXT = re.compile(
    r"RESOURCE_EXHAUSTED|exhausted your (?:capacity|daily quota)|exceeded your current quota|"
    r"rateLimitExceeded|\b429\b",
    re.I,
)
# A run that cannot work until the user acts (DESIGN "Retries"), as gemini-cli 0.61.0 says it:
# exit 41 (FatalAuthenticationError: no login), a 401/403 (exit 145/147: the status & 0xFF) or
# its words for a refused key; a model it cannot find (ModelNotFoundError, 404: exit 148).
AUTH_EXIT_CODES = (41, 401 & 0xFF, 403 & 0xFF)
AUTH_REFUSED = re.compile(
    r"UNAUTHENTICATED|PERMISSION_DENIED|API key not valid|authentication_error|"
    r"\b401\b|\b403\b|Please set an Auth method|GEMINI_API_KEY",
)
UNKNOWN_MODEL_EXIT_CODE = 404 & 0xFF
UNKNOWN_MODEL = re.compile(r"ModelNotFoundError|Model not found|models/\S+ is not found", re.I)
# How 0.61 wraps an API error in its messages: "[API Error: MESSAGE]" then, for a 429, a line of
# advice (packages/core/src/utils/errorParsing.ts).
API_ERROR = re.compile(r"^\[API Error: (.*)\]$", re.S)
# Stack frames of the errors Gemini prints while it retries ("    at async retryWithBackoff…").
STACK_FRAME = re.compile(r"^\s+at\s")
# Gemini reads a "system" settings file that overrides the user's and the project's settings,
# at a path this variable can change (its objects, such as mcpServers, are merged with theirs).
SYSTEM_SETTINGS_ENV = "GEMINI_CLI_SYSTEM_SETTINGS_PATH"
SYSTEM_SETTINGS_PATHS = {
    "darwin": "/Library/Application Support/GeminiCli/settings.json",
    "win32": "C:\\ProgramData\\gemini-cli\\settings.json",
}
LINUX_SYSTEM_SETTINGS = "/etc/gemini-cli/settings.json"


def own_words(text: str) -> str:
    """Gemini's message without its "[API Error: …]" wrapper (a provider's JSON body inside it
    reduced to its `error.message`), on one line."""
    text = text.strip()
    head, _, advice = text.partition("\n")
    found = API_ERROR.match(head.strip())
    if found:
        text = f"{_body_message(found.group(1))}\n{advice}"
    return " ".join(text.split())


def _body_message(text: str) -> str:
    """A provider's error body (`{"error": {"message": …}}`, or a list of them) as its message;
    any other text as it is."""
    try:
        body = loads_storable(text)
    except ValueError:
        return text
    body = body[0] if isinstance(body, list) and body else body
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message") or text) if isinstance(error, dict) else text


def system_settings(env: Mapping[str, str]) -> dict:
    """The system settings the run would have read (an administrator's, rarely any), so that a
    run's own file keeps them. Unreadable or not a JSON object: none."""
    path = env.get(SYSTEM_SETTINGS_ENV) or SYSTEM_SETTINGS_PATHS.get(
        sys.platform, LINUX_SYSTEM_SETTINGS
    )
    try:
        settings = loads_storable(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return settings if isinstance(settings, dict) else {}


class Gemini(Cli):
    name = CliType.GEMINI.value
    label = str(CliType.GEMINI.label)
    version_pattern = r"\d+\.\d+\.\d+\S*$"  # "0.61.0"
    event_types = frozenset({"init", "message", "tool_use", "tool_result", "error", "result"})
    # Printed on stderr at start-up (every --yolo run; a terminal without 256 colours; no
    # ripgrep installed); never part of any error.
    stderr_noise = (
        "YOLO mode is enabled",
        "Warning: 256-color support not detected",
        "Ripgrep is not available",
    )
    model_flag = "-m"
    model_hint = "a Gemini model name"
    model_suggestions = ("gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite")
    # No reasoning effort option in 0.61's --help: the model choice is all there is.
    reserved_options = (
        "-p",
        "--prompt",
        "-i",
        "--prompt-interactive",
        "-o",
        "--output-format",
        "-y",
        "--yolo",
        "--approval-mode",
        "-s",
        "--sandbox",
        "--include-directories",
        "-m",
        "--model",
        "--acp",
        "--experimental-acp",
        "-r",
        "--resume",
        "-w",
        "--worktree",
    )

    def command(self, invocation: Invocation) -> Command:
        argv = [invocation.binary, "-p", invocation.prompt, "--yolo", "--skip-trust"]
        if invocation.include_dirs:
            # One comma-separated value: the option is an array that swallows following words.
            argv += ["--include-directories", ",".join(invocation.include_dirs)]
        return Command([*argv, "-o", "stream-json", *self.option_args(invocation.options)])

    def mcp_setup(
        self, server: McpServer, *, env: Mapping[str, str], config_path: Path
    ) -> McpSetup:
        """A run's own system settings file (GEMINI_CLI_SYSTEM_SETTINGS_PATH) holding the
        server; never a `.gemini/settings.json` in the user's folders."""
        entry = server.stdio_entry()
        settings = config_with_server(system_settings(env), "mcpServers", server.name, entry)
        return McpSetup(
            env=((SYSTEM_SETTINGS_ENV, str(config_path)),),
            files=((config_path, json.dumps(settings, indent=2)),),
        )

    def health_command(self, binary: str) -> Command:
        """Streamed, as a run is: its `init` event is its first output, from which the check's
        time limit counts."""
        argv = [binary, "-p", HEALTH_PROMPT, "--yolo", "--skip-trust", "-o", "stream-json"]
        return Command(argv)

    def stream_parser(self) -> StreamParser:
        return GeminiStream()

    def usage_limit(self, *, stdout: str, stderr: str, now: datetime) -> Limit | None:
        """Read from its error texts as printed (the status words and the reset time are in
        them), shown in its own words (error_message)."""
        texts = [*self._error_texts(stdout, stderr), self._stderr_text(stderr)]
        found = first_limit(texts, LIMIT_TEXT, now)
        if found is None:
            return None
        own = self.error_message(stdout=stdout, stderr=stderr)
        return Limit(message=(own or found.message)[:500], reset_at=found.reset_at)

    def error_message(self, *, stdout: str, stderr: str) -> str:
        """Its stream's `result` error or `error` events, else the JSON error `-o json` prints
        (on stderr, after the retries' dumps), else stderr without start-up noise or stack
        frames: with "[API Error: …]" unwrapped and on one line."""
        said = self._error_texts(stdout, stderr)
        return own_words(said[-1] if said else self._stderr_text(stderr))

    def cannot_run_reason(self, result) -> str | None:
        if result.exit_code not in (0, None):  # its error events alone may be warnings
            raw = " ".join(self._error_texts(result.stdout, result.stderr))
            said = self.error_message(stdout=result.stdout, stderr=result.stderr)
            if result.exit_code in AUTH_EXIT_CODES or AUTH_REFUSED.search(raw):
                return f"logged out, or its login was refused: {said}"
            if result.exit_code == UNKNOWN_MODEL_EXIT_CODE or UNKNOWN_MODEL.search(raw + said):
                return f"unknown model: {said}"
        return not_this_cli(self, result)

    def _error_texts(self, stdout: str, stderr: str) -> list[str]:
        said = []
        for event in json_lines(stdout):
            if event.get("type") == "result" and event.get("status") == "error":
                said.append(error_message(event.get("error")))
            elif event.get("type") == "error":
                said.append(str(event.get("message") or ""))
        for text in (stdout, stderr):
            document = last_json_document(text)
            if document and isinstance(document.get("error"), dict):
                said.append(str(document["error"].get("message") or ""))
        return [text for text in said if text.strip()]

    def _stderr_text(self, stderr: str) -> str:
        lines = stderr.splitlines()
        return "\n".join(
            line
            for line in lines
            if not line.startswith(self.stderr_noise) and not STACK_FRAME.match(line)
        ).strip()

    def health_answer(self, stdout: str) -> str:
        """`-o stream-json`: the assistant's `message` events (deltas) joined; `-o json` prints
        one (indented) object whose `response` is the answer."""
        events = list(json_lines(stdout))
        said = [
            str(event.get("content") or "")
            for event in events
            if event.get("type") == "message" and event.get("role") == "assistant"
        ]
        if any(self.is_own_event(event) for event in events):
            return "".join(said).strip()
        document = json_document(stdout)
        if document is None or "response" not in document:
            return stdout.strip()
        return str(document.get("response") or "").strip()


class GeminiStream:
    """`-o stream-json` events."""

    def __init__(self) -> None:
        self.commands: set[str | None] = set()  # ids of tool calls that ran a command

    def parse(self, event: dict) -> list[StreamItem]:
        kind = event.get("type")
        if kind == "init":
            model = event.get("model")
            started = Trace("status", f"Started ({model or 'Gemini'})")
            # "auto" is Gemini's router, not a model: the result's stats name the real one.
            return [started, ModelUsed(str(model))] if model and model != "auto" else [started]
        if kind == "message" and event.get("role") == "assistant":
            text = event.get("content") or ""
            if event.get("delta"):
                return [Delta(text)] if text else []
            return [Trace("text", trim(text, TEXT_CHARS))] if text.strip() else []
        if kind == "tool_use":
            trace = tool_trace(event.get("tool_name", ""), event.get("parameters"))
            if trace.action_kind == "command":
                self.commands.add(event.get("tool_id"))
            return [trace]
        if kind == "tool_result":
            if event.get("tool_id") in self.commands:
                failed = event.get("status") not in (None, "success")
                return [command_result(event.get("output"), failed=failed)]
            if event.get("status") == "error":
                return [
                    Trace("error", trim((event.get("error") or {}).get("message") or "Tool failed"))
                ]
            return []
        if kind == "error":
            return [Trace("error", trim(event.get("message") or "Gemini reported an error"))]
        if kind == "result":
            stats = event.get("stats") or {}
            items: list[StreamItem] = [
                Usage(
                    input_tokens=int(stats.get("input_tokens") or 0),
                    output_tokens=int(stats.get("output_tokens") or 0),
                    total=True,
                )
            ]
            models = stats.get("models")
            if isinstance(models, dict) and models:
                items.append(ModelUsed(", ".join(str(name) for name in models)))
            if event.get("status") == "error":
                message = (event.get("error") or {}).get("message") or "Gemini reported an error"
                items.append(Trace("error", trim(message)))
            return items
        return []
