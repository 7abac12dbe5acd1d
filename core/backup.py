"""A consistent copy of the SQLite database while Malamar runs (SQLite's online backup API).

The copy is taken through the running process's own connection in one backup step, which reads
one snapshot of the database (WAL readers never block writers), so writes that go on meanwhile
are either wholly in the copy or wholly absent. The copy is checked and written under a
temporary name first, so DEST never holds half a file.
"""

import sqlite3
from pathlib import Path


class BackupError(Exception):
    pass


def sqlite_backup(source: sqlite3.Connection, destination: Path) -> None:
    """Copy the database behind `source` to `destination` (a new file), checked."""
    if destination.exists():
        raise BackupError(f"{destination} already exists: choose a new destination")
    partial = destination.with_name(destination.name + ".partial")
    partial.unlink(missing_ok=True)
    target = sqlite3.connect(partial)
    try:
        source.backup(target)  # pages=-1: the whole database in one step, one snapshot
        target.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        result = target.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        target.close()
    if result != "ok":
        partial.unlink(missing_ok=True)
        raise BackupError(f"The copy failed its integrity check: {result}")
    partial.rename(destination)
