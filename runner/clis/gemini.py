"""Gemini CLI: `gemini -p PROMPT --yolo --skip-trust --include-directories DIRS -o stream-json`.

No schema flag: the input file's output instruction carries the schema. Its file tools only
reach the working directory and `--include-directories`, so the temp folder is included.
"""

from agents.models import CliType
from runner.clis.base import (
    HEALTH_PROMPT,
    Cli,
    Command,
    Invocation,
    json_document,
)
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


class Gemini(Cli):
    name = CliType.GEMINI.value
    label = str(CliType.GEMINI.label)
    # Printed on stderr by every --yolo run; not part of any error.
    stderr_noise = ("YOLO mode is enabled",)
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

    def health_command(self, binary: str) -> Command:
        return Command([binary, "-p", HEALTH_PROMPT, "--yolo", "--skip-trust", "-o", "json"])

    def stream_parser(self) -> StreamParser:
        return GeminiStream()

    def health_answer(self, stdout: str) -> str:
        """`-o json` prints one (indented) object: the answer is its `response`."""
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
