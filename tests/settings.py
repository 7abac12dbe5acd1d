"""Test settings: an isolated data dir (created up front, so it is not a "first launch")."""

import os
import tempfile

os.environ.setdefault("MALAMAR_DATA_DIR", tempfile.mkdtemp(prefix="malamar-test-"))
os.environ["MALAMAR_TESTING"] = "1"

from malamar_site.settings import *  # noqa: F403
