"""Claude Code: `claude -p PROMPT --dangerously-skip-permissions --output-format stream-json
--verbose --json-schema SCHEMA`. The schema-conforming object comes back on stdout as
`structured_output`; `is_error` (not `subtype`) says whether the run failed."""

from agents.models import CliType
from runner.clis.base import (
    HEALTH_PROMPT,
    Cli,
    Command,
    Invocation,
    StdoutResult,
    last_json_object,
)
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

ROOT_HINT = (
    " Claude Code refuses --dangerously-skip-permissions as root: add IS_SANDBOX=1 to its "
    "environment variables in Settings → CLIs."
)


class Claude(Cli):
    name = CliType.CLAUDE.value
    label = str(CliType.CLAUDE.label)
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
                "--json-schema",
                schema_json(invocation.schema),
                *self.option_args(invocation.options),
            ]
        )

    def health_command(self, binary: str) -> Command:
        return Command(
            [
                binary,
                "-p",
                HEALTH_PROMPT,
                "--dangerously-skip-permissions",
                "--output-format",
                "json",
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
        """`--output-format json` prints one result object: the answer is its `result`."""
        result = last_json_object(stdout)
        if not result or result.get("type") != "result":
            return stdout.strip()
        return str(result.get("result") or "").strip()

    def explain(self, stderr: str) -> str:
        return ROOT_HINT if "root" in stderr and "dangerously-skip-permissions" in stderr else ""


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
