"""The databases of the real Malamar processes tests start (servers, workers, commands).

On SQLite (the default) a process uses the `malamar.db` file of its data dir, a copy of the
session's migrated template file. On PostgreSQL (`MALAMAR_TEST_DATABASE=postgres`) a data dir's
processes get DATABASE_URL of a database of their own on the session's cluster: created from the
session's migrated template database (`CREATE DATABASE … TEMPLATE`, a file copy: no migrating),
or empty (a process that migrates from zero). The databases go when the session ends.
"""

import contextlib
import os
import sqlite3
import threading
import uuid
from pathlib import Path

import pytest

ON_POSTGRES = os.environ.get("MALAMAR_TEST_DATABASE") == "postgres"
# The one-worker-per-data-dir lock is SQLite's: on PostgreSQL several workers share the database
# by design (tests/test_workers.py covers them there).
SQLITE_ONE_WORKER = pytest.mark.skipif(
    ON_POSTGRES, reason="SQLite's one worker per data dir: PostgreSQL allows several workers"
)


def postgres_only(reason: str):
    """A decorator for a test that proves something on PostgreSQL alone: marked `pg` (the
    PostgreSQL pass of `make test` runs only those, tests/conftest.py) and skipped on SQLite
    with `reason` printed. A bare `skipif(not ON_POSTGRES)` would run nowhere."""
    skip_on_sqlite = pytest.mark.skipif(not ON_POSTGRES, reason=reason)
    return lambda test: pytest.mark.pg(skip_on_sqlite(test))


_urls: dict[Path, str] = {}  # data dir → its PostgreSQL database
_lock = threading.Lock()


def _cluster_url(name: str) -> str:
    """The session cluster's URL (tests/settings.py) with another database name."""
    base = os.environ["MALAMAR_TEST_POSTGRES_URL"]
    return f"{base.rsplit('/', 1)[0]}/{name}"


def _admin(sql: str) -> None:
    """One statement on the cluster's maintenance database (CREATE/DROP DATABASE refuse to run
    inside a transaction: autocommit)."""
    import psycopg  # only on PostgreSQL runs

    with psycopg.connect(_cluster_url("postgres"), autocommit=True) as conn:
        conn.execute(sql)


def create_database(template: str | None = None) -> str:
    """A new database (from `template`, else empty); its URL."""
    name = f"malamar_{uuid.uuid4().hex[:16]}"
    _admin(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return _cluster_url(name)


def drop_database(url: str) -> None:
    """Drop a database created here, even with processes still connected to it."""
    name = url.rsplit("/", 1)[1]
    with contextlib.suppress(Exception):  # the cluster may be gone already at exit
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def assign(data_dir: Path, url: str) -> None:
    with _lock:
        _urls[Path(data_dir).resolve()] = url


def url_for(data_dir: Path) -> str:
    """The PostgreSQL database of `data_dir`'s processes: an empty one on first use."""
    key = Path(data_dir).resolve()
    with _lock:
        if key not in _urls:
            _urls[key] = create_database()
        return _urls[key]


def release(data_dir: Path) -> None:
    """Drop `data_dir`'s database now (its processes are stopped)."""
    with _lock:
        url = _urls.pop(Path(data_dir).resolve(), None)
    if url:
        drop_database(url)


def release_all() -> None:
    with _lock:
        urls = list(_urls.values())
        _urls.clear()
    for url in urls:
        drop_database(url)


def query(data_dir: Path, sql: str, *params) -> list[tuple]:
    """Rows of `sql` (`?` placeholders, as in sqlite3) on the database of `data_dir`."""
    if not ON_POSTGRES:
        with sqlite3.connect(Path(data_dir) / "malamar.db", timeout=5) as db:
            return db.execute(sql, params).fetchall()
    import psycopg

    with psycopg.connect(url_for(data_dir), autocommit=True) as conn:
        cursor = conn.execute(sql.replace("?", "%s"), params)
        return cursor.fetchall() if cursor.description else []  # a write returns no rows


# What `wipe` keeps: the rows the migrations wrote, and the live events of a running server (its
# relay's cursor and the streams' event ids go on from where they were).
KEPT_BY_WIPE = {
    "django_migrations",
    "django_content_type",
    "auth_permission",
    "sqlite_sequence",
    "event_outbox",
    "django_eventstream_event",
    "django_eventstream_eventcounter",
}


def tables(data_dir: Path) -> list[str]:
    """The tables of `data_dir`'s database."""
    sql = (
        "SELECT table_name FROM information_schema.tables"
        " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
        if ON_POSTGRES
        else "SELECT name FROM sqlite_master WHERE type = 'table'"
    )
    return sorted(name for (name,) in query(data_dir, sql))


def wipe(data_dir: Path) -> None:
    """Delete the rows of every table of `data_dir`'s database but KEPT_BY_WIPE, in one
    transaction: a running server's database as a new one copied from the template (tests that
    share a server start each from it). Its worker, if any, must be stopped."""
    deletes = [f'DELETE FROM "{table}"' for table in tables(data_dir) if table not in KEPT_BY_WIPE]
    if not ON_POSTGRES:
        db = sqlite3.connect(Path(data_dir) / "malamar.db", timeout=30)
        with contextlib.closing(db), db:  # one transaction; no foreign keys enforced here
            for delete in deletes:
                db.execute(delete)
        return
    import psycopg

    with psycopg.connect(url_for(data_dir)) as conn:  # one transaction, committed at the end
        conn.execute("SET CONSTRAINTS ALL DEFERRED")  # Django's foreign keys are deferrable
        for delete in deletes:
            conn.execute(delete)


class Template:
    """The session's migrated database without data: a SQLite file, or on PostgreSQL the name
    of a template database. `install(data_dir)` gives a data dir a copy of it."""

    def __init__(self, path: Path | None = None, database: str | None = None):
        self.path = path
        self.database = database

    def install(self, data_dir: Path) -> None:
        data_dir.mkdir(parents=True, exist_ok=True)
        if self.database:
            (data_dir / "malamar.db").touch()  # not a first launch: no sample workspace
            assign(data_dir, create_database(self.database))
        else:
            (data_dir / "malamar.db").write_bytes(self.path.read_bytes())
