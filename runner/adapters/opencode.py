"""OpenCode: `opencode run --auto --format json` with the prompt on standard input.

An argv prompt containing spaces reaches the model wrapped in literal quotes, so the prompt goes
through stdin. There is no schema flag and no final result event: the answer is the file the
output instruction names.
"""

from runner.adapters.base import (
    HEALTH_PROMPT,
    Command,
    Invocation,
    explain_nothing,
    read_stdout_nothing,
)

NAME = "opencode"
_RUN = ["run", "--auto", "--format", "json"]


def command(inv: Invocation) -> Command:
    return Command([inv.binary, *_RUN], stdin=inv.prompt.encode())


def health_command(binary: str) -> Command:
    return Command([binary, *_RUN], stdin=HEALTH_PROMPT.encode())


read_stdout = read_stdout_nothing
explain = explain_nothing
