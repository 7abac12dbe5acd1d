"""Claude Code: `claude -p PROMPT --dangerously-skip-permissions --output-format json
--json-schema SCHEMA`. The schema-conforming object comes back on stdout as `structured_output`;
`is_error` (not `subtype`) says whether the run failed."""

from runner.adapters.base import (
    HEALTH_PROMPT,
    Command,
    Invocation,
    StdoutResult,
    last_json_object,
)
from runner.schemas import schema_json

NAME = "claude"
ROOT_HINT = (
    " Claude Code refuses --dangerously-skip-permissions as root: add IS_SANDBOX=1 to its "
    "environment variables in Settings → CLIs."
)


def command(inv: Invocation) -> Command:
    return Command(
        [
            inv.binary,
            "-p",
            inv.prompt,
            "--dangerously-skip-permissions",
            # Streamed events for live activity; stream-json needs --verbose (else exit 1).
            "--output-format",
            "stream-json",
            "--verbose",
            "--json-schema",
            schema_json(inv.schema),
        ]
    )


def health_command(binary: str) -> Command:
    return Command(
        [binary, "-p", HEALTH_PROMPT, "--dangerously-skip-permissions", "--output-format", "json"]
    )


def health_answer(stdout: str) -> str:
    """`--output-format json` prints one result object: the answer is its `result`."""
    result = last_json_object(stdout)
    if not result or result.get("type") != "result":
        return stdout.strip()
    return str(result.get("result") or "").strip()


def read_stdout(stdout: str) -> StdoutResult:
    result = last_json_object(stdout)
    if not result or result.get("type") != "result":
        return StdoutResult()
    if result.get("is_error"):
        return StdoutResult(error=str(result.get("result") or "Claude Code reported an error"))
    structured = result.get("structured_output")
    return StdoutResult(structured=structured if isinstance(structured, dict) else None)


def explain(stderr: str) -> str:
    return ROOT_HINT if "root" in stderr and "dangerously-skip-permissions" in stderr else ""
