"""Test settings: an isolated data dir with a database file up front (so not a "first launch":
the test database gets no sample workspace)."""

import os
import tempfile
from pathlib import Path

os.environ.setdefault("MALAMAR_DATA_DIR", tempfile.mkdtemp(prefix="malamar-test-"))
(Path(os.environ["MALAMAR_DATA_DIR"]) / "malamar.db").touch()
os.environ["MALAMAR_TESTING"] = "1"

from malamar_site.settings import *  # noqa: E402, F403
