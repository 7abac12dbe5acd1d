import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from core.config import ConfigError, load


def _check_data_dir(path) -> tuple[bool, str]:
    if not path.exists():
        return False, f"{path} (missing, could not be created)"
    if not path.is_dir():
        return False, f"{path} (not a directory)"
    if not os.access(path, os.W_OK | os.X_OK):
        return False, f"{path} (exists, not writable)"
    return True, f"{path} (exists, writable)"


def _check_database() -> tuple[bool, str]:
    name = settings.DATABASES["default"]["NAME"]
    try:
        connection.ensure_connection()
        pending = MigrationExecutor(connection).migration_plan(
            MigrationExecutor(connection).loader.graph.leaf_nodes()
        )
    except Exception as exc:
        return False, f"{name} (not accessible: {exc})"
    if pending:
        return True, f"{name} (accessible, {len(pending)} migrations pending: run `malamar`)"
    return True, f"{name} (accessible, migrations current)"


def _cli_lines() -> tuple[list[tuple[bool, str]], int]:
    from runner.selectors import cli_health_all

    try:
        clis = cli_health_all()
    except Exception:
        return [(False, "unknown (database not readable)")], 0
    lines = []
    for cli in clis:
        status = cli["status"]
        if status == "healthy":
            where = (
                f" ({cli['cli_type']} found at {cli['binary_path']})" if cli["binary_path"] else ""
            )
            version = f" {cli['version']}" if cli["version"] else ""
            lines.append((True, f"{cli['name']}: healthy{version}{where}"))
        elif status == "unhealthy":
            lines.append((False, f"{cli['name']}: unhealthy ({cli['error'] or 'unknown error'})"))
        else:
            lines.append((None, f"{cli['name']}: not checked yet (start the worker: `malamar`)"))
    return lines, sum(1 for c in clis if c["status"] == "healthy")


def _access_line(db_ok: bool) -> str:
    config = settings.CONFIG
    hosts = ", ".join(config.allowed_hosts) or "none"
    if not db_ok:
        return f"• Access: unknown (database); extra allowed hosts: {hosts}"
    from django.db import DatabaseError

    from core.auth import access_mode, remote_access_refusal

    try:
        ok, mode = remote_access_refusal() is None, access_mode()
    except DatabaseError:
        return f"• Access: unknown until migrated; extra allowed hosts: {hosts}"
    mark = "✓" if ok else "✗"
    return f"{mark} Access: {mode}; bound to {config.host}; extra allowed hosts: {hosts}"


class Command(BaseCommand):
    help = "Check the data directory, database, configuration and CLIs."

    def handle(self, *args, **options):
        marks = {True: "✓", False: "✗", None: "•"}
        out = ["Malamar Doctor", ""]
        data_ok, data_text = _check_data_dir(settings.DATA_DIR)
        out.append(f"{marks[data_ok]} Data directory: {data_text}")
        db_ok, db_text = _check_database() if data_ok else (False, "not checked (data directory)")
        out.append(f"{marks[db_ok]} Database: {db_text}")
        try:
            load()
            out.append(f"{marks[True]} Configuration: valid")
        except ConfigError as exc:
            out.append(f"{marks[False]} Configuration: {exc}")
        out.append(_access_line(db_ok))
        out += ["", "CLI Status:"]
        lines, healthy = _cli_lines() if db_ok else ([], 0)
        out += [f"{marks[ok]} {text}" for ok, text in lines]
        out += ["", f"{healthy} of 4 CLIs available"]
        self.stdout.write("\n".join(out))
        if not (data_ok and db_ok):
            sys.exit(1)
