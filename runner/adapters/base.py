"""What every adapter builds: a Command (argv + standard input) for a run or a health check.

Adapters are pure: they build argv lists (never a shell string) and read CLI output text.
Only runner/worker/process.py starts processes.
"""

from dataclasses import dataclass, field
from pathlib import Path

from core.storable import loads_storable

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
    extra: dict = field(default_factory=dict)


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


def health_answer_plain(stdout: str) -> str:
    """The answer to the health prompt of a CLI that prints it as plain text."""
    return stdout.strip()


def read_stdout_nothing(stdout: str) -> StdoutResult:
    """For CLIs whose answer is only the output file."""
    return StdoutResult()


def explain_nothing(stderr: str) -> str:
    return ""
