"""Custom command: any agent CLI, set up per agent (agents.models.Agent.custom_*).

The agent gives a binary, an argument template in shell syntax (split with `shlex`, never run by
a shell) whose placeholders are filled in per argument, extra environment variables, and where
the answer comes from: the output file the input names ("file", as for the four CLIs) or a JSON
object printed on stdout ("stdout"). No stream format is known, so the Activity tab shows the
run without live traces; exit code, stop, stall and errors work as for the four.
"""

import json
from pathlib import Path

from core.storable import loads_storable
from runner.clis.base import (
    HEALTH_PROMPT,
    PLACEHOLDERS,
    Cli,
    Command,
    CustomCommand,
    Invocation,
    RunOptions,
    StdoutResult,
    fill,
)
from runner.streams import StreamItem, StreamParser


class Custom(Cli):
    name = "custom"
    label = "Custom command"
    model_hint = "passed as {model} in the argument template"

    def __init__(self, command: CustomCommand | None = None):
        self.custom = command or CustomCommand()

    def configured(self, options: RunOptions) -> "Custom":
        return Custom(options.custom) if options.custom else self

    def command(self, invocation: Invocation) -> Command:
        values = {
            "prompt": invocation.prompt,
            "input_file": str(invocation.input_path or ""),
            "output_file": str(invocation.output_path),
            "cwd": invocation.cwd,
            "model": invocation.options.model,
            "temp_dir": str(invocation.output_path.parent),
        }
        argv = fill(self.custom.args, values)
        return Command([invocation.binary, *argv, *invocation.options.extra_args])

    def health_command(self, binary: str) -> Command:
        """The template with the health prompt and no files (see health_command_in)."""
        values = dict.fromkeys(PLACEHOLDERS, "")
        values["prompt"] = HEALTH_PROMPT
        return Command([binary, *fill(self.custom.args, values)])

    def health_command_in(self, binary: str, input_path: Path) -> Command:
        """The health check's command, run in the folder where the caller wrote the health
        prompt as `input_path`: every placeholder names something real."""
        folder = input_path.parent
        values = {
            "prompt": HEALTH_PROMPT,
            "input_file": str(input_path),
            "output_file": str(folder / "malamar_health_output.json"),
            "cwd": str(folder),
            "model": "",
            "temp_dir": str(folder),
        }
        return Command([binary, *fill(self.custom.args, values)])

    def stream_parser(self) -> StreamParser:
        return NoStream()

    def read_stdout(self, stdout: str) -> StdoutResult:
        if self.custom.output != "stdout":
            return StdoutResult()
        result = last_json_value(stdout)
        if result is None:
            said = "nothing" if not stdout.strip() else "no JSON object"
            return StdoutResult(error=f"the command printed {said} on stdout")
        return StdoutResult(structured=result)

    def health_answer(self, stdout: str) -> str:
        return stdout.strip()


def last_json_value(text: str) -> dict | None:
    """The last JSON object in `text`, even one spread over several lines and followed by other
    output (e.g. a CLI's closing token count); read with the same limits as every CLI answer."""
    decoder, found, index = json.JSONDecoder(), None, text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except (ValueError, RecursionError):
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict):
            found = (index, end)
        index = text.find("{", end)
    if found is None:
        return None
    try:
        return loads_storable(text[found[0] : found[1]])
    except ValueError:
        return None


class NoStream:
    """A custom command's stdout has no known event format: no live traces."""

    def parse(self, event: dict) -> list[StreamItem]:
        return []
