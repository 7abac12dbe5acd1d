"""What every CLI provides, in one typed contract, and the pieces the CLIs share.

A CLI class is pure: it builds argv lists (never a shell string) and reads CLI output text.
Only runner/worker/process.py starts processes.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from core.storable import loads_storable
from runner.limits import Limit
from runner.streams import StreamParser

HEALTH_PROMPT = "Reply with the single word OK."


@dataclass(frozen=True)
class Invocation:
    binary: str
    prompt: str
    output_path: Path
    schema: dict
    schema_path: Path
    include_dirs: tuple[str, ...] = ()


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

    def usage_limit(self, *, stdout: str, stderr: str, now: datetime) -> Limit | None:
        """A failed run that ended on the quota or rate limit, with its reset time when the CLI
        names one (read only from the CLI's own error output, never from the agent's text)."""
        return None


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


def last_json_object(text: str) -> dict | None:
    """The last line of `text` that parses as a JSON object (CLIs print one result line)."""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = loads_storable(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


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
