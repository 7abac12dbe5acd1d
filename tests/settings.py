"""Test settings: an isolated data dir with a database file up front (so not a "first launch":
the test database gets no sample workspace)."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

if "MALAMAR_DATA_DIR" not in os.environ:
    # The process that starts the session makes the folder (xdist workers inherit it) and
    # removes it at exit, with the task and chat files the in-process worker wrote under it.
    os.environ["MALAMAR_DATA_DIR"] = tempfile.mkdtemp(prefix="malamar-test-")
    atexit.register(shutil.rmtree, os.environ["MALAMAR_DATA_DIR"], ignore_errors=True)
if worker := os.environ.get("PYTEST_XDIST_WORKER"):  # `make test` runs two: a dir for each
    os.environ["MALAMAR_DATA_DIR"] = str(Path(os.environ["MALAMAR_DATA_DIR"]) / worker)
    Path(os.environ["MALAMAR_DATA_DIR"]).mkdir(exist_ok=True)
(Path(os.environ["MALAMAR_DATA_DIR"]) / "malamar.db").touch()
# Task input files, temp folders and chat files go here, not in the machine's /tmp.
os.environ.setdefault("MALAMAR_TEMP_DIR", str(Path(os.environ["MALAMAR_DATA_DIR"]) / "tmp"))
Path(os.environ["MALAMAR_TEMP_DIR"]).mkdir(exist_ok=True)
os.environ["MALAMAR_TESTING"] = "1"

# `MALAMAR_TEST_DATABASE=postgres` runs the suite on a real PostgreSQL that this session starts
# (tests.services; `make test` runs the suite on both). The process that starts pytest starts
# it; the xdist workers inherit its address and each gets its own test database.
if os.environ.get("MALAMAR_TEST_DATABASE") == "postgres":
    if not os.environ.get("MALAMAR_TEST_POSTGRES_URL"):
        from tests.services import Postgres, ServiceError

        try:
            os.environ["MALAMAR_TEST_POSTGRES_URL"] = Postgres().start().url("malamar")
        except ServiceError as exc:  # one clear line rather than a traceback through pytest
            raise SystemExit(f"MALAMAR_TEST_DATABASE=postgres: {exc}") from None
    os.environ["DATABASE_URL"] = os.environ["MALAMAR_TEST_POSTGRES_URL"]

from malamar_site.settings import *  # noqa: E402, F403

# A database file rather than SQLite's shared in-memory one: in-process worker tests write from
# several threads, which a shared-cache memory database refuses at once ("database table is
# locked") where a file in WAL mode waits (busy_timeout), as the real server and worker do.
if not CONFIG.uses_postgres:  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(Path(os.environ["MALAMAR_DATA_DIR"]) / "test.db")}  # noqa: F405

# In the test process only (real servers started by tests keep Django's default): a fast hasher,
# as Django advises for tests; PBKDF2's million rounds made each login in a test cost ~0.3 s.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
