"""OpenCode: `opencode run --auto --format json` with the prompt on standard input.

An argv prompt containing spaces reaches the model wrapped in literal quotes, so the prompt goes
through stdin. There is no schema flag and no final result event: the answer is the file the
output instruction names.
"""

import json

from agents.models import CliType
from runner.clis.base import (
    HEALTH_PROMPT,
    Cli,
    Command,
    Invocation,
)
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

_RUN = ["run", "--auto", "--format", "json"]


class OpenCode(Cli):
    name = CliType.OPENCODE.value
    label = str(CliType.OPENCODE.label)
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

    def health_command(self, binary: str) -> Command:
        return Command([binary, *_RUN], stdin=HEALTH_PROMPT.encode())

    def stream_parser(self) -> StreamParser:
        return OpenCodeStream()

    def health_answer(self, stdout: str) -> str:
        """`--format json` prints JSONL events: the answer is the text of its `text` events."""
        texts, events = [], 0
        for line in stdout.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            events += 1
            part = event.get("part")
            if event.get("type") == "text" and isinstance(part, dict):
                texts.append(str(part.get("text") or ""))
        return "".join(texts).strip() if events else stdout.strip()


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
