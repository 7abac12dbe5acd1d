"""The squashed migrations (one per app, each replacing the app's original chain: a new database
migrates in about half the time). A new database gets from them exactly the schema the originals
give, and a database the originals migrated (every install before the squash) takes them as
applied without running anything. Real `manage.py` processes, on SQLite and on PostgreSQL."""

import re
from pathlib import Path

import pytest

from tests import databases
from tests.live import ROOT, blank_database, django_script, manage

pytestmark = [pytest.mark.live, pytest.mark.pg]

APPS = ("core", "workspaces", "agents", "tasks", "chats", "runner")
SQUASHED = {  # app → its squashed migration
    app: path.stem for app in APPS for path in (ROOT / app / "migrations").glob("0001_squashed_*")
}


def _made_after_squash(app: str) -> list[str]:
    """The app's migrations made after its squash (every database runs them)."""
    last = int(re.search(r"_squashed_(\d+)", SQUASHED[app]).group(1))
    found = (ROOT / app / "migrations").glob("[0-9][0-9][0-9][0-9]_*.py")
    return sorted(path.stem for path in found if int(path.stem[:4]) > last)


AFTER_SQUASH = sorted((app, name) for app in APPS for name in _made_after_squash(app))

THROUGH_ORIGINALS = """
from django.db import connection
from tests.migration_history import migrate_through_originals
migrate_through_originals(connection, {targets!r})
"""
# An older version's database: core and agents at their last migration, the others part way.
PART_WAY = [
    ("core", "0003_outbox_notify"),
    ("agents", "0004_usage_limits"),
    ("workspaces", "0004_title_max_length"),
    ("tasks", "0006_task_dependencies"),
    ("chats", "0005_usage_limits"),
    ("runner", "0006_usage_limits"),
]

# Everything a migration can create, as the database itself describes it. PostgreSQL: columns in
# their order (not their numbers: a dropped column leaves a gap), constraints, indexes, triggers
# and functions with their definitions, sequences.
POSTGRES_SCHEMA = {
    "column": """SELECT table_name, column_name, data_type, character_maximum_length,
        numeric_precision, numeric_scale, is_nullable, column_default, is_identity,
        identity_generation, collation_name
        FROM information_schema.columns WHERE table_schema = current_schema()
        ORDER BY table_name, ordinal_position""",
    "constraint": """SELECT conrelid::regclass::text, conname, contype,
        pg_get_constraintdef(oid), condeferrable, condeferred
        FROM pg_constraint WHERE connamespace = current_schema()::regnamespace
        ORDER BY 1, 2""",
    "index": """SELECT tablename, indexname, indexdef FROM pg_indexes
        WHERE schemaname = current_schema() ORDER BY 1, 2""",
    "trigger": """SELECT tgrelid::regclass::text, tgname, pg_get_triggerdef(oid)
        FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1, 2""",
    "function": """SELECT proname, pg_get_functiondef(oid) FROM pg_proc
        WHERE pronamespace = current_schema()::regnamespace ORDER BY 1""",
    "sequence": """SELECT sequence_name, data_type, start_value, increment
        FROM information_schema.sequences WHERE sequence_schema = current_schema()
        ORDER BY 1""",
}
# SQLite keeps each table's, index's and trigger's CREATE statement: columns, their types,
# defaults and constraints, foreign keys, check constraints.
SQLITE_SCHEMA = """SELECT type, name, tbl_name, sql FROM sqlite_master
    WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"""


def definitions(create_table: str) -> tuple[str, ...]:
    """The column and constraint definitions of a CREATE TABLE statement, sorted: on SQLite
    the original migrations leave a column whose AlterField came last at the end of its table
    (Django's table remake there moves the altered column last; PostgreSQL's ALTER COLUMN keeps
    it in place), the squashed ones create it where the model has it (PostgreSQL's order)."""
    body = create_table[create_table.index("(") + 1 : create_table.rindex(")")]
    parts, depth, quoted, start = [], 0, False, 0
    for at, char in enumerate(body):
        if char == "'":
            quoted = not quoted
        elif not quoted and char in "()":
            depth += 1 if char == "(" else -1
        elif not quoted and depth == 0 and char == ",":
            parts.append(body[start:at].strip())
            start = at + 1
    parts.append(body[start:].strip())
    return tuple(sorted(parts))


def schema(data_dir: Path) -> list[tuple]:
    if not databases.ON_POSTGRES:
        return [
            (kind, name, table, definitions(sql) if kind == "table" else sql)
            for kind, name, table, sql in databases.query(data_dir, SQLITE_SCHEMA)
        ]
    return [
        (kind, *row)
        for kind, sql in POSTGRES_SCHEMA.items()
        for row in databases.query(data_dir, sql)
    ]


def recorded(data_dir: Path) -> list[tuple]:
    return databases.query(data_dir, "SELECT app, name FROM django_migrations ORDER BY app, name")


def shown_marks(data_dir: Path) -> dict[str, str]:
    """`showmigrations` of our apps: each migration's mark ([X] applied, [ ] not, [-] partly)."""
    result = manage(data_dir, "showmigrations", *APPS)
    assert result.returncode == 0, result.stderr
    return dict(
        (name, mark) for mark, name in re.findall(r"^ (\[.\]) (\w+)", result.stdout, re.MULTILINE)
    )


@pytest.fixture(scope="module")
def through_originals(tmp_path_factory) -> Path:
    """A data dir whose database the original migrations built (no squashed one ran)."""
    data_dir = tmp_path_factory.mktemp("through-originals")
    blank_database(data_dir)
    django_script(data_dir, THROUGH_ORIGINALS.format(targets=None))  # to the last ones
    return data_dir


def test_every_app_has_one_squashed_migration():
    assert sorted(SQUASHED) == sorted(APPS)
    assert ("tasks", "0012_next_process") in AFTER_SQUASH  # (what the globs find)


def test_a_new_database_gets_the_same_schema_from_the_squashed_migrations(
    tmp_path, through_originals
):
    data_dir = tmp_path / "new"
    blank_database(data_dir)
    result = manage(data_dir, "migrate", "--no-input", "-v", "1")
    assert result.returncode == 0, result.stderr

    applied = re.findall(r"Applying (\w+)\.(\w+)\.\.\.", result.stdout)
    ours = sorted((app, name) for app, name in applied if app in APPS)
    expected = sorted([*SQUASHED.items(), *AFTER_SQUASH])
    assert ours == expected, "each app migrated by its squashed migration, then the newer ones"
    built = schema(data_dir)
    if databases.ON_POSTGRES:  # the outbox's NOTIFY trigger is a RunPython the squash keeps
        assert any(row[:3] == ("trigger", "event_outbox", "event_outbox_notify") for row in built)
    assert built == schema(through_originals)
    assert recorded(data_dir) == recorded(through_originals)  # the squashed ones and originals


def test_a_database_the_originals_migrated_takes_the_squashed_migrations_as_applied(
    through_originals,
):
    data_dir = through_originals
    # A database migrated before the squash has no row for the squashed migrations.
    databases.query(data_dir, "DELETE FROM django_migrations WHERE name LIKE ?", "%squashed%")
    before = schema(data_dir)

    check = manage(data_dir, "migrate", "--check")
    assert check.returncode == 0, check.stdout + check.stderr  # nothing to apply
    # Django's words for squashed migrations whose originals all ran: "[-] … to finish recording"
    newer = {name: "[X]" for _app, name in AFTER_SQUASH}
    assert shown_marks(data_dir) == {**{name: "[-]" for name in SQUASHED.values()}, **newer}

    result = manage(data_dir, "migrate", "--no-input", "-v", "1")
    assert result.returncode == 0, result.stderr
    assert "No migrations to apply." in result.stdout
    assert schema(data_dir) == before
    assert shown_marks(data_dir) == {name: "[X]" for name in [*SQUASHED.values(), *newer]}


def test_a_database_an_older_version_migrated_part_way_goes_on_through_the_originals(
    tmp_path, through_originals
):
    data_dir = tmp_path / "older"
    blank_database(data_dir)
    django_script(data_dir, THROUGH_ORIGINALS.format(targets=PART_WAY))
    result = manage(data_dir, "migrate", "--no-input", "-v", "1")
    assert result.returncode == 0, result.stderr

    applied = re.findall(r"Applying (\w+)\.(\w+)\.\.\.", result.stdout)
    assert ("workspaces", "0005_branch_per_task") in applied
    assert ("tasks", "0011_line_comment_drafts") in applied
    assert not [(app, name) for app, name in applied if "squashed" in name]
    assert schema(data_dir) == schema(through_originals)
    newer = [name for _app, name in AFTER_SQUASH]
    assert shown_marks(data_dir) == {name: "[X]" for name in [*SQUASHED.values(), *newer]}
