"""OpenCode: `opencode run --auto --format json` with the prompt on standard input.

An argv prompt containing spaces reaches the model wrapped in literal quotes, so the prompt goes
through stdin. There is no schema flag and no final result event: the answer is the file the
output instruction names.
"""

import json

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


def health_answer(stdout: str) -> str:
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


explain = explain_nothing
