"""What every CLI provides, in one typed contract, and the pieces the CLIs share.

A CLI class is pure: it builds argv lists (never a shell string) and reads CLI output text.
Only runner/worker/process.py starts processes.
"""

import json
import re
import shlex
import string
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from core.storable import loads_storable
from runner.limits import Limit
from runner.streams import StreamParser

HEALTH_PROMPT = "Reply with the single word OK."


@dataclass(frozen=True)
class CustomCommand:
    """A "Custom command" agent's CLI (runner/clis/custom.py): its binary, its argument
    template (shlex syntax with placeholders, no shell), extra environment, and where its answer
    comes from: "file" (it writes {output_file}) or "stdout" (it prints the JSON result)."""

    binary: str = ""
    args: str = "{prompt}"
    env: tuple[tuple[str, str], ...] = ()
    output: str = "file"


@dataclass(frozen=True)
class RunOptions:
    """An agent's own settings for its CLI: model (empty = the CLI's default), reasoning effort
    (only for CLIs that have one) and extra arguments (validated by agents.services). They
    apply only when the run uses the agent's own CLI (a chat's CLI override runs without them:
    another CLI's flags would break it)."""

    model: str = ""
    effort: str = ""
    extra_args: tuple[str, ...] = ()
    custom: CustomCommand | None = None


@dataclass(frozen=True)
class McpServer:
    """An MCP server for one run (Malamar's own: `malamar mcp --workspace ID`, see
    tasks/mcp_server.py): its name, the command that starts it over stdio, and the environment
    it needs besides the CLI's (values may land in argv: never a secret)."""

    name: str
    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def stdio_entry(self) -> dict:
        """The `{"command", "args", "env"}` entry Claude's and Gemini's configs share."""
        return {"command": self.command, "args": list(self.args), "env": dict(self.env)}


@dataclass(frozen=True)
class McpSetup:
    """How a run hands its CLI an MCP server: arguments, environment variables and private
    files (path, text) that live as long as the run, in its temp folder; never the user's own
    CLI configuration."""

    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    files: tuple[tuple[Path, str], ...] = ()


@dataclass(frozen=True)
class Invocation:
    binary: str
    prompt: str
    output_path: Path
    schema: dict
    schema_path: Path
    include_dirs: tuple[str, ...] = ()
    options: RunOptions = field(default_factory=RunOptions)
    input_path: Path | None = None
    cwd: str = ""
    mcp_args: tuple[str, ...] = ()  # McpSetup.args: where they go is the CLI's business


@dataclass(frozen=True)
class Command:
    argv: list[str]
    stdin: bytes | None = None  # None: standard input is /dev/null


@dataclass(frozen=True)
class StdoutResult:
    """What a CLI's stdout says about the run, beyond its exit code."""

    structured: dict | None = None  # the schema-conforming object, when the CLI returns it
    error: str | None = None  # the CLI reported a failure despite exit code 0


class Cli(ABC):
    """One agent CLI: everything Malamar knows about it. Each CLI module holds one subclass and
    the registry (`runner.clis.CLIS`) one instance of it. `name`, `label` and the abstract
    methods are required; the rest default to "nothing to say" (no stderr noise, the answer is
    the output file, no known trap to explain)."""

    name: ClassVar[str]  # the `cli_type` stored on agents and runs (agents.models.CliType)
    label: ClassVar[str]  # how the user knows it
    # Prefixes of routine stderr lines, never an error.
    stderr_noise: ClassVar[tuple[str, ...]] = ()
    # What `--version` prints (a regular expression; empty: anything), and the `type`s of its
    # streamed events: a binary that prints neither is another program, not this CLI.
    version_pattern = ""
    event_types = frozenset()  # type: frozenset[str]

    # What an agent may set for this CLI (from its --help in shared/cli-samples/help/); the
    # defaults say "nothing": no model flag, no reasoning effort, every argument allowed.
    model_flag = ""  # the option taking the agent's model
    model_hint = ""  # how the model is written, for the agent dialog
    model_suggestions = ()  # type: tuple[str, ...]
    efforts = ()  # the reasoning efforts it accepts (empty: it has none)
    # Options that would break Malamar's contract (prompt, output, format, schema, permissions,
    # sandbox, working directory) or that have a field of their own (model, effort).
    reserved_options = ()  # type: tuple[str, ...]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        missing = [name for name in Cli.__annotations__ if not hasattr(cls, name)]
        if missing:
            raise TypeError(f"CLI {cls.__name__} does not define {', '.join(missing)}")

    @abstractmethod
    def command(self, invocation: Invocation) -> Command:
        """The headless run of one agent step."""

    @abstractmethod
    def health_command(self, binary: str) -> Command:
        """A minimal prompt (HEALTH_PROMPT) that proves login and network."""

    @abstractmethod
    def stream_parser(self) -> StreamParser:
        """A fresh parser for one run's stdout events."""

    def read_stdout(self, stdout: str) -> StdoutResult:
        """What the run's stdout says: a structured answer or an error despite exit code 0.
        By default nothing: the answer is the output file the input names."""
        return StdoutResult()

    @abstractmethod
    def health_answer(self, stdout: str) -> str:
        """The answer to the health command's prompt."""

    def explain(self, stderr: str) -> str:
        """A hint appended to a failed run's error when stderr shows a known trap, else ""."""
        return ""

    def error_message(self, *, stdout: str, stderr: str) -> str:
        """The CLI's own words about a failed run: from its structured output where it has
        one (each CLI knows its events), else its stderr without start-up noise; "" when it
        said nothing. Error comments and limit messages show these words first."""
        return stderr_message(stderr, self.stderr_noise)

    def cannot_run_reason(self, result) -> str | None:
        """Why this CLI cannot run at all (logged out, key refused, unknown model, not this
        CLI), read from a failed run's process result (runner.worker.process.ProcessResult),
        else None. Such a run is not retried on a timer: its tasks wait until the CLI works
        again (DESIGN "Retries"). A process that could not start is that already, for every
        CLI (runner.worker.execution.interpret)."""
        return None

    def version_problem(self, version: str) -> str:
        """Why `--version`'s output (its first line) shows another program than this CLI, or
        "" (e.g. a binary path set to a wrong program passes `--version` with exit 0)."""
        if not self.version_pattern or re.match(self.version_pattern, version.strip()):
            return ""
        shown = version.strip()[:80] or "nothing"
        return f"not {self.label}: `--version` printed {shown!r}"

    def mcp_setup(
        self, server: McpServer, *, env: Mapping[str, str], config_path: Path
    ) -> McpSetup:
        """How this CLI gets `server` for one run, in the way the CLI supports (`env`: the
        run's environment, to build on what the user set; `config_path`: a private file name
        in the run's temp folder, if a file is needed). By default none: no MCP support."""
        return McpSetup()

    def configured(self, options: RunOptions) -> "Cli":
        """The CLI as this run's agent set it up (the custom command carries its own)."""
        return self

    def effort_args(self, effort: str) -> list[str]:
        """The arguments that set `effort` (only called for one of `efforts`)."""
        return []

    def option_args(self, options: RunOptions) -> list[str]:
        """The agent's model, effort and extra arguments as arguments of this CLI."""
        args = [self.model_flag, options.model] if options.model and self.model_flag else []
        if options.effort in self.efforts:
            args += self.effort_args(options.effort)
        return args + list(options.extra_args)

    def reserved_option(self, arg: str) -> str | None:
        """The reserved option `arg` is (or sets, as `--opt=value` or a glued `-ovalue`)."""
        for option in self.reserved_options:
            if arg == option or arg.startswith(option + "="):
                return option
            if len(option) == 2 and option.startswith("-") and arg.startswith(option):
                return option  # a short option with its value glued on
        return None

    def is_own_event(self, event: dict) -> bool:
        """An event of this CLI's stream (a `type` of any other shape, e.g. a list, is not)."""
        kind = event.get("type")
        return isinstance(kind, str) and kind in self.event_types

    def usage_limit(self, *, stdout: str, stderr: str, now: datetime) -> Limit | None:
        """A failed run that ended on the quota or rate limit, with its reset time when the CLI
        names one (read only from the CLI's own error output, never from the agent's text)."""
        return None

    def waits_out_a_limit(self, stderr_line: str, now: datetime) -> Limit | None:
        """A line the CLI printed on stderr while it runs, saying it now waits, silently, for a
        provider's limit to reset (the run is then stopped and paused as a usage limit)."""
        return None


def not_this_cli(cli: Cli, result) -> str | None:
    """A finished run whose stdout holds none of the CLI's streamed events although it printed
    something, or exited 0: the binary is another program (a CLI failing before its stream,
    e.g. on an unknown option, exits non-zero with stdout empty and is not called that)."""
    ended = result.exit_code is not None and not result.start_error
    if not ended or result.stopped or result.timed_out or getattr(result, "stalled", False):
        return None
    if any(cli.is_own_event(event) for event in json_lines(result.stdout)):
        return None
    if result.exit_code != 0 and not result.stdout.strip():
        return None
    return f"not {cli.label}: its binary printed none of {cli.label}'s events"


def config_with_server(config: object, key: str, name: str, entry: dict) -> dict:
    """A CLI's JSON configuration (anything but an object counts as none) with the MCP server
    `entry` as `name` under `key`, the servers already there kept."""
    config = config if isinstance(config, dict) else {}
    servers = config.get(key) if isinstance(config.get(key), dict) else {}
    return {**config, key: {**servers, name: entry}}


def json_lines(text: str):
    """Every line of `text` that parses as a JSON object (a CLI's event stream)."""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = loads_storable(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                yield value


def error_message(error) -> str:
    """The message of a JSON `error` a CLI printed: an object's `message`, or the text itself
    (any other shape: none)."""
    if isinstance(error, dict):
        return str(error.get("message") or "")
    return error if isinstance(error, str) else ""


def last_json_object(text: str) -> dict | None:
    """The last line of `text` that parses as a JSON object (CLIs print one result line)."""
    return next(json_lines("\n".join(reversed(text.splitlines()))), None)


def stderr_message(stderr: str, noise: tuple[str, ...] = ()) -> str:
    """A readable error from stderr: a JSON `error.message` if present, else the text without
    the CLI's routine notices (`noise`: line prefixes)."""
    lines = [line for line in stderr.splitlines() if not line.startswith(noise or ("\0",))]
    text = "\n".join(lines).strip()
    start = text.find("{")
    if start != -1:
        try:
            value = loads_storable(text[start:])
        except ValueError:
            value = None
        if isinstance(value, dict):
            error = value.get("error")
            if isinstance(error, dict) and error.get("message"):
                return str(error["message"])
    return text


def last_json_document(text: str) -> dict | None:
    """The JSON object `text` ends with, starting a line (possibly over several lines: Gemini's
    `-o json` prints its result or error after the other output)."""
    decoder, end = json.JSONDecoder(), len(text.rstrip())
    index = end
    for _attempt in range(50):  # a document starts at one of the last few lines, or none
        index = text.rfind("\n{", 0, index)
        start = index + 1 if index != -1 else 0
        if not text.startswith("{", start):
            return None
        try:
            _value, stop = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            if index == -1:
                return None
            continue  # a line inside the document, or a broken one: look further up
        return json_document(text[start:end]) if stop == end else None
    return None


def json_document(text: str) -> dict | None:
    """The JSON object `text` holds from its first "{" (possibly over several lines)."""
    start = text.find("{")
    if start == -1:
        return None
    try:
        value = loads_storable(text[start:])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


# Custom commands' argument templates (runner/clis/custom.py; agents.services validates them).
# {temp_dir}: the folder holding the input and output files (outside {cwd}; CLIs that limit
# their file tools to a workspace need it included).
PLACEHOLDERS = ("prompt", "input_file", "output_file", "cwd", "model", "temp_dir")


class TemplateError(ValueError):
    """An argument template that cannot be used (the message names what is wrong)."""


def template_args(template: str) -> list[str]:
    """The template's arguments, each checked: only known placeholders, written plainly
    (`{prompt}`, not `{prompt!r}` or `{prompt.x}`); `{{` and `}}` are literal braces."""
    try:
        args = shlex.split(template)
    except ValueError as exc:  # e.g. an unclosed quote
        raise TemplateError(f"the argument template cannot be split: {exc}") from None
    for arg in args:
        try:
            fields = list(string.Formatter().parse(arg))
        except ValueError as exc:
            raise TemplateError(f"argument {arg!r}: {exc} (write {{{{ for a brace)") from None
        for _text, name, spec, conversion in fields:
            if name is None:
                continue
            if name not in PLACEHOLDERS or spec or conversion:
                known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                raise TemplateError(
                    f"argument {arg!r}: unknown placeholder {{{name}}} (known: {known})"
                )
    return args


def fill(template: str, values: dict[str, str]) -> list[str]:
    """The template's arguments with the placeholders replaced (one argv element each, so a
    prompt with spaces or quotes stays one argument). An argument holding {model} is left out
    when no model is set, so `--model={model}` means "the CLI's default" then."""
    return [
        arg.format_map(values)
        for arg in template_args(template)
        if values.get("model") or "{model}" not in arg
    ]
