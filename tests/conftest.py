"""Fixtures of the whole suite, and the rule for the `pg` marker.

`make test` runs the whole suite on SQLite and, at the same time, only the tests marked `pg` on
PostgreSQL (`MALAMAR_TEST_DATABASE=postgres pytest -m pg`, tests/run_suite.py). Mark a test
`pg` (`@pytest.mark.pg`, or `pytestmark` for a whole module) when what it proves could hold on
SQLite and fail on PostgreSQL:
- concurrency: claims and locks (SKIP LOCKED, FOR NO KEY UPDATE), the pickup, the worker's
  threads or several workers racing, stop requests, wake-ups (LISTEN/NOTIFY), the event relay;
- the database's own rules: constraints and IntegrityError paths, transactions rolled back,
  text or numbers it refuses (NUL, values longer than a column, out of range: the "never a 500"
  hostile-input tests), case-insensitive search, NULL ordering, migrations, statement counts;
- storage read back through SQL: settings, CLI health and limits, back-off times, backup;
- a kind of real process finding the test's database (the server and worker, the `malamar mcp`
  a CLI starts): one test each, not every test that starts one.
Not `pg`: what renders, parses, validates before the database or runs the same on both (pages,
the API's validation, CLI adapters, the fake CLIs, git, browser tests) and what another `pg` test
proves already. A test for PostgreSQL alone uses `tests.databases.postgres_only(reason)`: marked
`pg`, skipped on SQLite; so does the scale-out test, which starts its own PostgreSQL and Redis
and runs once, in the PostgreSQL pass (which ends minutes before the SQLite pass: the minute it
takes is better spent there).
"""

import json
import os
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from agents.services import agent_create
from runner.clis.base import Invocation
from runner.recorder import RunRecorder
from runner.schemas import task_schema
from tasks.services import task_create
from tests import databases
from tests.stack import InProcessStack, Stack, migrated_template, session_template
from workspaces.services import workspace_create

# The fake CLIs start with `#!/usr/bin/env python3`: resolve that to this interpreter directly
# (a pyenv shim would add a quarter of a second to every fake CLI run).
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"


class ApiClient:
    """Django's test client speaking JSON, like the real API clients."""

    def __init__(self, **headers):
        self.client = Client(**headers)

    def _send(self, method, path, body=None, **extra):
        data = json.dumps(body) if body is not None else ""
        return getattr(self.client, method)(path, data, content_type="application/json", **extra)

    def get(self, path, **extra):
        return self.client.get(path, **extra)

    def post(self, path, body=None, **extra):
        return self._send("post", path, body, **extra)

    def put(self, path, body=None, **extra):
        return self._send("put", path, body, **extra)

    def delete(self, path, **extra):
        return self.client.delete(path, **extra)


@pytest.fixture
def api(db):
    return ApiClient()


@pytest.fixture
def workspace(db):
    return workspace_create(title="Project X", description="Build things")


@pytest.fixture
def agents(workspace):
    return [
        agent_create(workspace=workspace, name=name, instruction=f"You are the {name}.")
        for name in ("Planner", "Implementer", "Reviewer")
    ]


@pytest.fixture
def task(workspace):
    return task_create(workspace=workspace, summary="Add a login page", description="With tests")


@pytest.fixture
def task_recorder(task):
    """Makes the recorder of a claude run on `task` (options such as stall_warn_seconds)."""

    def make(**options) -> RunRecorder:
        return RunRecorder(
            cli_type="claude",
            workspace_id=task.workspace_id,
            agent_id=None,
            agent_name="Planner",
            task_id=task.id,
            **options,
        )

    return make


def cli_invocation(tmp_path: Path, **fields) -> Invocation:
    """A task run's invocation for the CLI adapters' argv tests (`fields` override)."""
    defaults = {
        "binary": "/bin/cli",
        "prompt": "Read the file at /t/in.md and follow the instruction autonomously.",
        "output_path": tmp_path / "out.json",
        "schema": task_schema(),
        "schema_path": tmp_path / "schema.json",
    }
    return Invocation(**defaults | fields)


def error_of(response) -> dict:
    body = response.json()
    assert set(body) == {"error"}, body
    return body["error"]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker, tmp_path_factory):
    """pytest-django's test database, and a copy of it as it is right after its migrations: the
    template every real server of the session starts from (`template_db`)."""
    folder = tmp_path_factory.mktemp("malamar-template")
    with django_db_blocker.unblock():
        if connection.settings_dict["NAME"] == connection.creation._get_test_db_name():
            _TEMPLATE["db"] = session_template(folder)
        else:  # no test of this session uses the database, so pytest-django made none
            _TEMPLATE["db"] = migrated_template(folder)


_TEMPLATE: dict = {}


@pytest.fixture(scope="session")
def template_db(django_db_setup) -> databases.Template:
    """A migrated database without data (no sample workspace): real servers start from a copy
    (`tests.stack.data_dir_from`)."""
    return _TEMPLATE["db"]


# Rough seconds a test takes on 2 cores, by its mark: the ones that start real processes.
COST_BY_MARK = {"scaleout": 60.0, "browser": 5.0, "live": 3.0}
BROWSER_TESTS = Path(__file__).resolve().parent / "browser"
IN_PROCESS_COST = 0.05


def _cost(item: pytest.Item) -> float:
    return max(
        (cost for mark, cost in COST_BY_MARK.items() if item.get_closest_marker(mark)),
        default=IN_PROCESS_COST,
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The costliest test files first (`make test` passes --no-loadscope-reorder to xdist,
    which would order them by their number of tests): the scale-out test and the browser
    modules start early, and the short in-process files that run last even out the two
    processes' ends, rather than one long file running alone at the end. The browser modules
    come before all others, one after the other, so that they share one Chromium in a process
    (tests/browser/conftest.py). A file's tests keep their order."""
    cost, first = {}, {}
    for index, item in enumerate(items):
        cost[item.path] = cost.get(item.path, 0.0) + _cost(item)
        first.setdefault(item.path, index)
    items.sort(
        key=lambda item: (
            BROWSER_TESTS not in item.path.parents,
            -cost[item.path],
            first[item.path],
        )
    )


# What a test file that marks tests `pg` holds (`@pytest.mark.pg`, `pytestmark`, `marks=`, or
# tests.databases.postgres_only).
PG_MARKS = ("mark.pg", "postgres_only(")


def marks_pg(path: Path) -> bool:
    return any(mark in path.read_text(encoding="utf-8") for mark in PG_MARKS)


def pytest_ignore_collect(collection_path, config):
    """The PostgreSQL pass (`-m pg`) imports only the test files that mark tests `pg`: the
    others (about 60 of 100) cost it ~5 CPU-s to import for no test. test_suite_rules checks
    that every `pg` test is in a file this picks."""
    test_file = collection_path.name.startswith("test_") and collection_path.suffix == ".py"
    if test_file and config.getoption("markexpr") == "pg":
        return not marks_pg(collection_path)
    return None


def pytest_sessionfinish(session):
    """On PostgreSQL: drop the databases of the session's real processes (tests.databases)."""
    if databases.ON_POSTGRES:
        databases.release_all()


@pytest.fixture
def start_stack(transactional_db, tmp_path, settings, monkeypatch):
    """`start_stack(**env)`: the worker in-process (tests.stack.InProcessStack) on the test
    database, with extra environment variables (read by the fake CLIs, say)."""
    started = []

    def start(**env) -> InProcessStack:
        running = InProcessStack(tmp_path, settings=settings, monkeypatch=monkeypatch, **env)
        started.append(running)
        return running.start()

    yield start
    for running in started:
        running.stop()


@pytest.fixture
def stack(start_stack):
    return start_stack()


@pytest.fixture
def live_stack(tmp_path, template_db):
    """Real server and worker processes (tests.stack.Stack): only for what needs them."""
    running = Stack(tmp_path, template_db).start()
    yield running
    running.stop()
