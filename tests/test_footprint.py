"""What `malamar` loads on the default deployment (SQLite, no Redis): not the clients of the
services it does not use. redis-py (with the OpenTelemetry it imports, ~18 MB) and psycopg
(~20 MB) stay out of the server-and-worker process until a REDIS_URL or DATABASE_URL asks."""

import subprocess
import sys

from tests.live import ROOT, blank_database, process_env

LOADS = """
import sys
import django
django.setup()
import core.relay, core.sse, malamar_site.server_process, malamar_site.urls, runner.worker.loop
print(" ".join(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_the_server_and_worker_on_sqlite_load_no_redis_or_postgresql_client(tmp_path):
    blank_database(tmp_path)
    env = process_env(tmp_path)
    env.pop("DATABASE_URL", None)  # the default deployment, also when the suite runs on PostgreSQL
    env.pop("REDIS_URL", None)
    command = [sys.executable, "-c", LOADS]
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    loaded = set(result.stdout.split())
    assert "malamar_site" in loaded and "runner" in loaded
    assert {"redis", "psycopg", "opentelemetry"} & loaded == set()
