"""`malamar doctor`: the data directory, database, configuration and each CLI, checked now."""

import os
import sys
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection
from django.utils.timesince import timesince

from agents.models import CliType
from core.auth import access_mode, remote_access_refusal
from core.config import ConfigError, ensure_data_dir, load
from core.settings_store import cli_settings_for
from runner.git import GitError, git_binary, git_text
from runner.models import CliHealthStatus
from runner.selectors import cli_health_all, database_status, redis_status, workers_live
from runner.worker import health


def _check_data_dir(path) -> tuple[bool, str]:
    if not path.exists():
        return False, f"{path} (missing, could not be created)"
    if not path.is_dir():
        return False, f"{path} (not a directory)"
    if not os.access(path, os.W_OK | os.X_OK):
        return False, f"{path} (exists, not writable)"
    return True, f"{path} (exists, writable)"


def _check_database() -> tuple[bool, str, bool]:
    """Whether the database answers, what to say about it, and whether it is new (no database
    yet: nothing wrong, the first `malamar` creates it)."""
    db = database_status()
    if db["error"]:
        return False, f"{db['name']} (not accessible: {db['error']})", False
    server = f"server {db['server']}, " if db["server"] else ""
    if db["fresh"] and not db["server"]:
        return True, f"{db['name']} (not created yet: the first `malamar` creates it)", True
    if db["fresh"]:
        return True, f"{db['name']} ({server}no tables yet: the first `malamar` creates them)", True
    if db["pending"]:
        pending = f"{db['pending']} migrations pending: run `malamar`"
        return True, f"{db['name']} ({server}accessible, {pending})", False
    return True, f"{db['name']} ({server}accessible, migrations current)", False


def _check_redis() -> tuple[bool, str] | None:
    """With REDIS_URL: does Redis answer a PING."""
    if not settings.CONFIG.redis_url:
        return None
    status = redis_status(settings.CONFIG.redis_url)
    if status["error"]:
        return False, f"{status['where']} (no answer: {status['error']})"
    return True, f"{status['where']} (answers, version {status['version']})"


NO_WORKERS = "none yet (`malamar` or `manage.py runworker` starts one)"


def _worker_lines(db_ok: bool, fresh: bool) -> list[str]:
    """The live workers: where, how busy, which CLIs, how long since their last heartbeat."""
    if fresh:
        return [f"• Workers: {NO_WORKERS}"]
    if not db_ok:
        return ["• Workers: unknown (database)"]
    try:
        workers = workers_live()
    except DatabaseError:
        return ["• Workers: unknown until migrated"]
    if not workers:
        return ["• Workers: none running (`malamar` or `manage.py runworker` starts one)"]
    lines = [f"✓ Workers: {len(workers)} live"]
    for worker in workers:
        capacity = worker["capacity"] or "any"
        clis = ", ".join(worker["cli_types"]) or "no healthy CLI"
        lines.append(
            f"    {worker['hostname']} pid {worker['pid']}: {worker['running']} of {capacity}"
            f" running; CLIs: {clis}; last heartbeat {worker['heartbeat_age']:.1f} s ago"
        )
    return lines


def _check_git() -> tuple[bool, str]:
    """git records what agents change (the Changes tab); without it everything else works."""
    binary = git_binary()
    if binary is None:
        return False, "not found: install the git package to see what agents change"
    try:
        version = git_text("--version", cwd=settings.DATA_DIR)
    except GitError as exc:
        return False, f"{binary} does not answer: {exc}"
    return True, f"{version.removeprefix('git version ')} ({binary})"


def _stored_health(db_ok: bool) -> dict[str, dict]:
    if not db_ok:
        return {}
    try:
        return {row["cli_type"]: row for row in cli_health_all()}
    except Exception:
        return {}


NO_SETTINGS = {"binary_path": "", "env": {}}


def _cli_settings(db_ok: bool, cli: str) -> dict:
    """The CLI's settings from the database; without one, no configured path (PATH only)."""
    if db_ok:
        try:
            return cli_settings_for(cli)
        except Exception:
            pass
    return NO_SETTINGS


def _check(cli: str, db_ok: bool) -> dict:
    """The worker's own check (runner.worker.health), `--version` only: found, and that CLI."""
    try:
        return health.check(cli, full=False, conf=_cli_settings(db_ok, cli))
    finally:
        connection.close()  # the pool's thread may have read the settings: no idle session left


def _worker_line(stored: dict | None) -> str:
    if not stored or not stored.get("checked_at") or stored["status"] == "not_checked":
        return "    worker's check (a test prompt): none yet (it runs when `malamar` starts)"
    age = timesince(stored["checked_at"], depth=1).replace("\xa0", " ")
    status = CliHealthStatus(stored["status"]).label.lower()
    error = f": {stored['error']}" if stored["status"] != "healthy" and stored["error"] else ""
    return f"    worker's check (a test prompt): {status}, {age} ago{error}"


def _verdict(found: str, stored: dict | None) -> str:
    """One status for the CLI, by the rule the worker and the server use: unhealthy if either
    check failed, slow if either was slow (still available), else healthy."""
    statuses = {found, (stored or {}).get("status", CliHealthStatus.NOT_CHECKED)}
    for status in (CliHealthStatus.UNHEALTHY, CliHealthStatus.SLOW):
        if status in statuses:
            return status
    return CliHealthStatus.HEALTHY


MARKS = {
    CliHealthStatus.HEALTHY: "✓",
    CliHealthStatus.SLOW: "•",  # available, only slow to answer
    CliHealthStatus.UNHEALTHY: "✗",
}


def _cli_lines(db_ok: bool) -> tuple[list[str], int]:
    """Check every CLI now (binary, `--version`, as the worker does), next to the worker's last
    stored check (which also sent the real prompt); available unless one of them failed."""
    stored = _stored_health(db_ok)
    with ThreadPoolExecutor(max_workers=len(CliType.values)) as pool:
        found = list(pool.map(lambda cli: _check(cli, db_ok), CliType.values))
    lines: list[str] = []
    available = 0
    for cli, outcome in zip(CliType, found, strict=True):
        verdict = _verdict(outcome["status"], stored.get(cli.value))
        available += verdict != CliHealthStatus.UNHEALTHY
        where = f" ({outcome['binary_path']})" if outcome.get("binary_path") else ""
        if outcome["status"] == CliHealthStatus.HEALTHY:
            version = f" {outcome['version']}" if outcome.get("version") else ""
            text = f"{cli.label}:{version}{where}"
        else:
            text = f"{cli.label}: {outcome['error']}{where}"
        lines += [f"{MARKS[verdict]} {text}", _worker_line(stored.get(cli.value))]
    return lines, available


def _access_line(db_ok: bool, fresh: bool) -> str:
    config = settings.CONFIG
    hosts = ", ".join(config.allowed_hosts) or "none"
    if not db_ok:
        return f"• Access: unknown (database); extra allowed hosts: {hosts}"
    known = False if fresh else None  # a new database holds no password
    try:
        ok = remote_access_refusal(password_set=known) is None
        mode = access_mode(password_set=known)
    except DatabaseError:
        return f"• Access: unknown until migrated; extra allowed hosts: {hosts}"
    mark = "✓" if ok else "✗"
    return f"{mark} Access: {mode}; bound to {config.host}; extra allowed hosts: {hosts}"


class Command(BaseCommand):
    help = "Check the data directory, database, configuration and CLIs."

    def handle(self, *args, **options):
        marks = {True: "✓", False: "✗", None: "•"}
        out = ["Malamar Doctor", ""]
        ensure_data_dir(settings.CONFIG)
        data_ok, data_text = _check_data_dir(settings.DATA_DIR)
        out.append(f"{marks[data_ok]} Data directory: {data_text}")
        db_ok, db_text, fresh = (
            _check_database() if data_ok else (False, "not checked (data directory)", False)
        )
        out.append(f"{marks[db_ok]} Database: {db_text}")
        try:
            load()
            out.append(f"{marks[True]} Configuration: valid")
        except ConfigError as exc:
            out.append(f"{marks[False]} Configuration: {exc}")
        redis_check = _check_redis()
        if redis_check is not None:
            out.append(f"{marks[redis_check[0]]} Redis (live events): {redis_check[1]}")
        out += _worker_lines(db_ok, fresh)
        out.append(_access_line(db_ok, fresh))
        git_ok, git_text_ = _check_git()
        out.append(f"{marks[git_ok]} Git (snapshots, Changes tab): {git_text_}")
        out += ["", "CLI Status (found, and `--version` answers now, as the worker checks):"]
        readable = db_ok and not fresh  # (SQLite: reading would create the file)
        lines, available = _cli_lines(readable) if data_ok else ([], 0)
        out += lines
        out += ["", f"{available} of 4 CLIs available (slow to answer counts as available)"]
        self.stdout.write("\n".join(out))
        if not (data_ok and db_ok):
            sys.exit(1)
