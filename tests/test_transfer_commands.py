"""`malamar export`, `malamar import` and `malamar backup` as a user runs them (subprocesses),
the backup while another process keeps writing."""

import json
import sqlite3
import subprocess
import sys
import threading

import pytest

from core.backup import BackupError, sqlite_backup
from tests import databases
from tests.live import ROOT, process_env
from tests.stack import data_dir_from

pytestmark = pytest.mark.live


def malamar(*args, data_dir, temp_dir, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "malamar_site.cli", *args],
        env=process_env(data_dir, MALAMAR_TEMP_DIR=temp_dir),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def source(tmp_path):
    """A data dir holding one workspace with an agent, two chained tasks and a chat with a file,
    made by importing a file (which also tests `malamar import`)."""
    data, temp = tmp_path / "data", tmp_path / "temp"
    temp.mkdir()
    document = {
        "format": "malamar.workspace",
        "version": 1,
        "workspace": {
            "title": "Shop",
            "description": "",
            "created_at": "2026-01-01T00:00:00+00:00",
            "updated_at": "2026-01-01T00:00:00+00:00",
        },
        "agents": [
            {
                "id": "a1",
                "name": "Coder",
                "instruction": "Code.",
                "cli_type": "claude",
                "order": 0,
                "created_at": "2026-01-01T00:00:00+00:00",
                "updated_at": "2026-01-01T00:00:00+00:00",
            }
        ],
        "tasks": [
            _task("t1", "Plan", "in_review", "2026-01-01T00:00:00+00:00"),
            _task("t2", "Build", "todo", "2026-01-01T00:01:00+00:00"),
        ],
        "dependencies": [
            {"task_id": "t2", "blocker_id": "t1", "created_at": "2026-01-01T00:00:00+00:00"}
        ],
        "chats": [
            {
                "id": "c1",
                "title": "Talk",
                "created_at": "2026-01-01T00:00:00+00:00",
                "updated_at": "2026-01-01T00:00:00+00:00",
                "participants": [
                    {
                        "agent_id": "a1",
                        "cli_type": None,
                        "enabled": True,
                        "position": 0,
                        "created_at": "2026-01-01T00:00:00+00:00",
                    }
                ],
                "messages": [],
                "attachments": [{"name": "notes.txt", "content_base64": "aGVsbG8="}],
            }
        ],
    }
    file = tmp_path / "in.json"
    file.write_text(json.dumps(document))
    result = malamar("import", str(file), data_dir=data, temp_dir=temp)
    assert result.returncode == 0, result.stderr
    assert "Imported “Shop” as workspace " in result.stdout
    return data, temp


def _task(task_id, summary, status, created_at):
    return {
        "id": task_id,
        "summary": summary,
        "description": "",
        "status": status,
        "is_priority": False,
        "created_at": created_at,
        "updated_at": "2026-01-01T00:00:00+00:00",
        "comments": [],
        "logs": [],
    }


def test_export_then_import_into_another_instance(source, tmp_path, template_db):
    data, temp = source  # a new data dir: `malamar import` migrated it from zero
    out = tmp_path / "shop.json"
    result = malamar(
        "export", "Shop", "-o", str(out), "--attachments", data_dir=data, temp_dir=temp
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert [t["summary"] for t in document["tasks"]] == ["Plan", "Build"]
    assert document["chats"][0]["attachments"][0]["name"] == "notes.txt"
    other = data_dir_from(template_db, tmp_path / "other")  # an instance in use: migrated
    other_temp = tmp_path / "other-temp"
    other_temp.mkdir()
    result = malamar("import", str(out), "--title", "Shop 2", data_dir=other, temp_dir=other_temp)
    assert result.returncode == 0, result.stderr
    titles = {t for (t,) in databases.query(other, "SELECT title FROM workspaces")}
    assert "Shop 2" in titles
    assert databases.query(other, "SELECT COUNT(*) FROM task_dependencies") == [(1,)]
    # Imported work starts paused: nothing queued, and the command says how to resume it.
    assert databases.query(other, "SELECT COUNT(*) FROM task_queue") == [(0,)]
    assert "Its 1 task(s) start paused" in result.stdout
    [folder] = [p for p in other_temp.iterdir() if p.name.endswith("_attachments")]
    assert (folder / "notes.txt").read_text() == "hello"
    # A file from a newer Malamar: refused, exit 1, a message, nothing imported.
    out.write_text(json.dumps({**document, "version": 2}))
    result = malamar("import", str(out), data_dir=other, temp_dir=other_temp)
    assert result.returncode == 1
    assert "Nothing was imported: The file is from a newer Malamar" in result.stderr
    assert databases.query(other, "SELECT COUNT(*) FROM task_dependencies") == [(1,)]
    result = malamar("export", "Nope", data_dir=other, temp_dir=other_temp)
    assert result.returncode == 1 and "No workspace with the id or title" in result.stderr


@pytest.mark.skipif(databases.ON_POSTGRES, reason="SQLite's backup (PostgreSQL: pg_dump)")
def test_backup_while_another_process_writes_opens_and_matches(source, tmp_path):
    data, temp = source
    database = data / "malamar.db"
    with sqlite3.connect(database) as db:
        task_id, workspace_id = db.execute("SELECT id, workspace_id FROM tasks").fetchone()
    stop = threading.Event()
    written = []

    def write():
        """Each transaction adds one comment and one log: a consistent copy has as many of
        each, and a prefix of what was written."""
        db = sqlite3.connect(database, timeout=10, isolation_level=None)
        db.execute("PRAGMA busy_timeout=10000")
        n = 0
        while not stop.is_set():
            n += 1
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT INTO task_comments (id, task_id, workspace_id, content, kind, created_at,"
                " updated_at) VALUES (?, ?, ?, ?, 'user', '2026-01-01', '2026-01-01')",
                (f"c{n:019d}", task_id, workspace_id, f"w{n}"),
            )
            db.execute(
                "INSERT INTO task_logs (id, task_id, workspace_id, event_type, actor_type,"
                " metadata, created_at) VALUES (?, ?, ?, 'w', 'user', '{}', '2026-01-01')",
                (f"l{n:019d}", task_id, workspace_id),
            )
            db.execute("COMMIT")
            written.append(n)
        db.close()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        result = malamar("backup", str(tmp_path / "backup"), data_dir=data, temp_dir=temp)
    finally:
        stop.set()
        writer.join()
    assert result.returncode == 0, result.stderr
    assert "Backed up the database to" in result.stdout
    copy = sqlite3.connect(tmp_path / "backup" / "malamar.db")
    assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    comments = copy.execute("SELECT COUNT(*) FROM task_comments WHERE content LIKE 'w%'").fetchone()
    logs = copy.execute("SELECT COUNT(*) FROM task_logs WHERE event_type = 'w'").fetchone()
    assert comments == logs  # never half a transaction
    assert written[-1] > 0 and comments[0] <= written[-1]
    ids = [
        i
        for (i,) in copy.execute("SELECT id FROM task_comments WHERE content LIKE 'w%' ORDER BY id")
    ]
    assert ids == [f"c{n:019d}" for n in range(1, comments[0] + 1)]  # a prefix of the writes
    # Everything written before the backup started is there, as in the source.
    for table in ("workspaces", "agents", "tasks", "task_dependencies", "chats"):
        query = f"SELECT * FROM {table} ORDER BY 1"
        with sqlite3.connect(database) as db:
            assert copy.execute(query).fetchall() == db.execute(query).fetchall(), table
    copy.close()
    [folder] = (tmp_path / "backup" / "attachments").iterdir()
    assert (folder / "notes.txt").read_text() == "hello"
    # DEST must be new or empty.
    result = malamar("backup", str(tmp_path / "backup"), data_dir=data, temp_dir=temp)
    assert result.returncode == 1 and "not a new or empty folder" in result.stderr


def test_sqlite_backup_refuses_an_existing_file(tmp_path):
    source = sqlite3.connect(tmp_path / "a.db")
    source.execute("CREATE TABLE t (x)")
    (tmp_path / "b.db").write_text("keep")
    with pytest.raises(BackupError, match="already exists"):
        sqlite_backup(source, tmp_path / "b.db")
    assert (tmp_path / "b.db").read_text() == "keep"


@databases.postgres_only("PostgreSQL only")
def test_backup_on_postgresql_says_to_use_pg_dump(source, tmp_path):
    data, temp = source
    result = malamar("backup", str(tmp_path / "backup"), data_dir=data, temp_dir=temp)
    assert result.returncode == 1
    assert "With PostgreSQL, back up with pg_dump" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "backup").exists()
