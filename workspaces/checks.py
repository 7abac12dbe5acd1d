"""A workspace's checks (issue 30): the project's own commands (tests, linters) that gate a task
before it goes In Review. Each is a name, a command (split like a shell would, run without one,
as the setup command is) and a time limit. This module only reads and cleans them."""

import math
import shlex
from dataclasses import dataclass

from core.errors import ValidationFailed

CHECKS_MAX = 20
NAME_MAX = 80
COMMAND_MAX = 2000
TIMEOUT_DEFAULT_MINUTES = 10
TIMEOUT_MAX_MINUTES = 24 * 60
ATTEMPTS_DEFAULT = 3
ATTEMPTS_MAX = 20


@dataclass(frozen=True)
class Check:
    name: str
    command: str
    timeout_minutes: float = TIMEOUT_DEFAULT_MINUTES

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.command)

    @property
    def timeout_seconds(self) -> float:
        return self.timeout_minutes * 60

    def as_dict(self) -> dict:
        return {"name": self.name, "command": self.command, "timeout_minutes": self.timeout_minutes}


def workspace_checks(workspace) -> list[Check]:
    """The workspace's checks, in order (stored clean; a row of an older shape is skipped)."""
    checks = []
    for row in workspace.checks or []:
        if isinstance(row, dict) and row.get("command"):
            minutes = row.get("timeout_minutes") or TIMEOUT_DEFAULT_MINUTES
            checks.append(Check(str(row.get("name") or row["command"]), row["command"], minutes))
    return checks


def _fail(message: str) -> ValidationFailed:
    return ValidationFailed(message, field="checks")


def _clean_one(raw, number: int) -> dict:
    where = f"check {number}"
    if not isinstance(raw, dict):
        raise _fail(f"{where} must be an object with a name, a command and timeout_minutes")
    unknown = set(raw) - {"name", "command", "timeout_minutes"}
    if unknown:
        raise _fail(f"{where}: {sorted(unknown)[0]} is not a check setting")
    command = raw.get("command")
    if not isinstance(command, str) or not command.strip():
        raise _fail(f"{where} needs a command (for example: python -m pytest -q)")
    command = command.strip()
    if len(command) > COMMAND_MAX:
        raise _fail(f"{where}: the command is longer than {COMMAND_MAX} characters")
    try:
        if not shlex.split(command):
            raise ValueError("nothing to run")
    except ValueError as exc:
        raise _fail(f"{where}: the command cannot be read: {exc}") from None
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise _fail(f"{where}: the name must be text")
    name = (name or "").strip() or command.split()[0]
    if len(name) > NAME_MAX:
        raise _fail(f"{where}: the name is longer than {NAME_MAX} characters")
    minutes = raw.get("timeout_minutes")
    if minutes is None or minutes == "":
        minutes = TIMEOUT_DEFAULT_MINUTES
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, int | float)
        or math.isnan(minutes)
        or not 0 < minutes <= TIMEOUT_MAX_MINUTES
    ):
        raise _fail(f"{where}: timeout_minutes must be a number from 0 to {TIMEOUT_MAX_MINUTES}")
    return {"name": name, "command": command, "timeout_minutes": minutes}


def checks_clean(raw) -> list[dict]:
    """The checks as stored, or ValidationFailed saying which one is wrong and why."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise _fail("checks must be a list of {name, command, timeout_minutes}")
    if len(raw) > CHECKS_MAX:
        raise _fail(f"A workspace has at most {CHECKS_MAX} checks")
    return [_clean_one(row, number) for number, row in enumerate(raw, start=1)]


def attempts_clean(raw) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or not 1 <= raw <= ATTEMPTS_MAX:
        raise ValidationFailed(
            f"checks_attempts must be a whole number from 1 to {ATTEMPTS_MAX}",
            field="checks_attempts",
        )
    return raw
