"""Gemini CLI: `gemini -p PROMPT --yolo --skip-trust --include-directories DIRS -o json`.

No schema flag: the input file's output instruction carries the schema. Its file tools only
reach the working directory and `--include-directories`, so the temp folder is included.
"""

from runner.adapters.base import (
    HEALTH_PROMPT,
    Command,
    Invocation,
    explain_nothing,
    json_document,
    read_stdout_nothing,
)

NAME = "gemini"
# Printed on stderr by every --yolo run; not part of any error.
STDERR_NOISE = ("YOLO mode is enabled",)


def command(inv: Invocation) -> Command:
    argv = [inv.binary, "-p", inv.prompt, "--yolo", "--skip-trust"]
    if inv.include_dirs:
        # One comma-separated value: the option is an array that swallows following words.
        argv += ["--include-directories", ",".join(inv.include_dirs)]
    return Command([*argv, "-o", "stream-json"])


def health_command(binary: str) -> Command:
    return Command([binary, "-p", HEALTH_PROMPT, "--yolo", "--skip-trust", "-o", "json"])


read_stdout = read_stdout_nothing


def health_answer(stdout: str) -> str:
    """`-o json` prints one (indented) object: the answer is its `response`."""
    document = json_document(stdout)
    if document is None or "response" not in document:
        return stdout.strip()
    return str(document.get("response") or "").strip()


explain = explain_nothing
