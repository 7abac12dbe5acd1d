"""The test suite's own rules: a PostgreSQL-only test runs in the PostgreSQL pass (the `pg`
marker, tests/conftest.py), and the wipe that lets browser tests share a server leaves its
database as new."""

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest, databases, run_suite
from tests.live import django_script, wait_until
from tests.stack import data_dir_from

TESTS = Path(__file__).resolve().parent
# A skip on SQLite written by hand: the test would run in no pass (the PostgreSQL pass runs only
# `pg` tests). tests.databases.postgres_only(reason) marks it too.
HAND_WRITTEN_SQLITE_SKIP = re.compile(
    r"skipif\(\s*(not\s+[\w.]*ON_POSTGRES|[\"']connection\.vendor\s*!=|[\w.]*environ[^)]*\)\s*!=)"
)


def test_a_test_skipped_on_sqlite_is_marked_for_the_postgresql_pass():
    hand_written = [
        f"{path.relative_to(TESTS)}:{text[: match.start()].count(chr(10)) + 1}"
        for path in sorted(TESTS.rglob("*.py"))
        if path.name != "databases.py"
        for text in [path.read_text()]
        for match in HAND_WRITTEN_SQLITE_SKIP.finditer(text)
    ]
    assert not hand_written, f"use tests.databases.postgres_only(reason) at {hand_written}"


def test_no_pg_test_is_skipped_on_postgresql(request):
    sqlite_only = databases.SQLITE_ONE_WORKER.kwargs["reason"]
    contradictions = [
        item.nodeid
        for item in request.session.items
        if item.get_closest_marker("pg")
        and any(mark.kwargs.get("reason") == sqlite_only for mark in item.iter_markers("skipif"))
    ]
    assert not contradictions, f"marked pg but skipped on PostgreSQL: {contradictions}"


POPULATE = """
from core.models import Marker
from core.settings_store import settings_update
from tasks.services import task_create
from workspaces.models import FIRST_RUN_DISMISSED
from workspaces.services import workspace_create

task_create(workspace=workspace_create(title="Before"), summary="Left by an earlier test")
settings_update(changes={"stall_warning_minutes": 3})
Marker.objects.create(name=FIRST_RUN_DISMISSED)
"""


# What a running server's live events keep using (SQLite's id counters among them): the rows
# the wipe leaves.
LIVE_EVENTS = {
    "event_outbox",
    "django_eventstream_event",
    "django_eventstream_eventcounter",
    "sqlite_sequence",
}


def _counts(data_dir: Path) -> dict[str, int]:
    return {
        table: databases.query(data_dir, f'SELECT COUNT(*) FROM "{table}"')[0][0]
        for table in databases.tables(data_dir)
    }


@pytest.mark.pg
def test_wipe_leaves_the_database_as_new_but_for_the_live_events(template_db, tmp_path):
    data_dir = data_dir_from(template_db, tmp_path / "data")
    try:
        new = _counts(data_dir)
        django_script(data_dir, POPULATE)
        written = _counts(data_dir)
        assert {"workspaces", "tasks", "settings", "markers", "event_outbox"} <= {
            table for table, count in written.items() if count > new[table]
        }
        databases.wipe(data_dir)
        wiped = _counts(data_dir)
        assert {t: n for t, n in wiped.items() if t not in LIVE_EVENTS} == {
            t: n for t, n in new.items() if t not in LIVE_EVENTS
        }
        assert {t: n for t, n in wiped.items() if t in LIVE_EVENTS} == {
            t: n for t, n in written.items() if t in LIVE_EVENTS
        }
    finally:
        databases.release(data_dir)


def test_the_costliest_files_run_first_each_in_one_piece(request):
    """`make test` hands xdist the files in this order (tests/conftest.py): a file's tests
    together, the browser modules first (they share a Chromium), and in each of the two groups
    the files by what their tests cost, so a long one does not start last."""
    files = [item.path for item in request.session.items]
    runs = [path for index, path in enumerate(files) if index == 0 or files[index - 1] != path]
    assert len(runs) == len(set(runs)), "a file's tests are split"
    cost = {path: 0.0 for path in runs}
    for item in request.session.items:
        cost[item.path] += conftest._cost(item)
    browser = [path for path in runs if conftest.BROWSER_TESTS in path.parents]
    assert runs[: len(browser)] == browser, "a browser module after another file"
    for group in (runs[: len(browser)], runs[len(browser) :]):
        assert [cost[path] for path in group] == sorted((cost[p] for p in group), reverse=True)


def test_every_pg_test_is_in_a_file_the_postgresql_pass_imports(request):
    """The PostgreSQL pass imports only the files that mark tests `pg` (conftest.marks_pg): a
    `pg` test marked another way would run in neither pass's PostgreSQL."""
    pg_files = {item.path for item in request.session.items if item.get_closest_marker("pg")}
    assert {path for path in pg_files if not conftest.marks_pg(path)} == set()


def _passes(monkeypatch, sqlite_exit: int, postgres_exit: int) -> None:
    """tests/run_suite.py with each pass a Python one-liner printing its name and exiting."""

    def one_liner(name: str, status: int) -> list[str]:
        return [sys.executable, "-c", f"print('{name} ran'); raise SystemExit({status})"]

    monkeypatch.setattr(run_suite, "SQLITE_PASS", one_liner("sqlite", sqlite_exit))
    monkeypatch.setattr(run_suite, "POSTGRES_PASS", one_liner("postgres", postgres_exit))


@pytest.mark.parametrize(("sqlite_exit", "postgres_exit"), [(0, 0), (1, 0), (0, 1), (2, 1)])
def test_make_test_fails_when_either_pass_fails_and_shows_both(
    monkeypatch, capfd, sqlite_exit, postgres_exit
):
    _passes(monkeypatch, sqlite_exit, postgres_exit)
    status = run_suite.main([])
    out = capfd.readouterr().out
    assert status == (1 if sqlite_exit or postgres_exit else 0)
    assert out.index("sqlite ran") < out.index("PostgreSQL pass") < out.index("postgres ran")
    last = out.strip().splitlines()[-1]
    for name, exit_status in (("SQLite", sqlite_exit), ("PostgreSQL", postgres_exit)):
        verdict = "passed" if exit_status == 0 else f"FAILED (exit status {exit_status})"
        assert f"{name} pass" in last and verdict in last.split(f"{name} pass")[1].split(";")[0]


# A pass that says it started (a file), then waits until Ctrl-C and stops as pytest does.
INTERRUPTIBLE_PASS = """
import pathlib, sys, time
pathlib.Path(sys.argv[1]).touch()
try:
    time.sleep(600)
except KeyboardInterrupt:
    print(sys.argv[2], "stopped its servers")
    raise SystemExit(2)
"""
# Ctrl-C as in a terminal: an xdist process ignores SIGINT, and its children would inherit that.
RUN_INTERRUPTIBLE = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
from tests import run_suite
one = [sys.executable, "-c", sys.argv[1]]
run_suite.SQLITE_PASS = [*one, sys.argv[2] + "/sqlite", "sqlite"]
run_suite.POSTGRES_PASS = [*one, sys.argv[2] + "/postgres", "postgres"]
sys.exit(run_suite.main([]))
"""


def test_ctrl_c_stops_both_passes_and_make_test_reports_them(tmp_path):
    runner = subprocess.Popen(
        [sys.executable, "-c", RUN_INTERRUPTIBLE, INTERRUPTIBLE_PASS, str(tmp_path)],
        cwd=run_suite.ROOT,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a terminal of its own: Ctrl-C is SIGINT to its group
    )
    try:
        started = [tmp_path / "sqlite", tmp_path / "postgres"]
        wait_until(lambda: all(p.exists() for p in started), timeout=60, what="both passes")
        os.killpg(runner.pid, signal.SIGINT)
        out = runner.communicate(timeout=60)[0]
    finally:  # the runner and both passes, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.killpg(runner.pid, signal.SIGKILL)
    assert runner.returncode == 1
    assert "sqlite stopped its servers" in out and "postgres stopped its servers" in out
    assert "SQLite pass (whole suite): FAILED (exit status 2)" in out
