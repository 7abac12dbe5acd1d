"""Codex CLI: `codex exec --dangerously-bypass-approvals-and-sandbox --skip-git-repo-check
--output-schema SCHEMA_FILE -o OUTPUT_FILE PROMPT`; Codex writes its final, schema-constrained
message to OUTPUT_FILE itself. Standard input must be closed (an open pipe hangs it)."""

from runner.adapters.base import (
    HEALTH_PROMPT,
    Command,
    Invocation,
    explain_nothing,
    health_answer_plain,
    read_stdout_nothing,
)

NAME = "codex"
_EXEC = ["exec", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check"]


def command(inv: Invocation) -> Command:
    # -o and --output-schema go together: -o alone overwrites the file with plain chat text.
    return Command(
        [
            inv.binary,
            *_EXEC,
            "--json",
            "--output-schema",
            str(inv.schema_path),
            "-o",
            str(inv.output_path),
            inv.prompt,
        ]
    )


def health_command(binary: str) -> Command:
    return Command([binary, *_EXEC, HEALTH_PROMPT])


read_stdout = read_stdout_nothing
# Without --json, codex prints only its final message on stdout (the banner goes to stderr).
health_answer = health_answer_plain
explain = explain_nothing
