"""How long `manage.py migrate` takes on a new data dir (every first launch pays it).

Runs `manage.py migrate -v 0` from zero several times and prints the median wall time and CPU
time of the process (user + system). SQLite by default: a blank data dir each run. With
`--postgres`, a throwaway cluster (tests/services.py) and an empty database each run.

    .venv/bin/python bench/migrate.py [--runs 5] [--postgres]
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def migrate_once(data_dir: Path, database_url: str | None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `manage.py migrate` on a new data dir."""
    env = {**os.environ, "MALAMAR_DATA_DIR": str(data_dir)}
    env.pop("DATABASE_URL", None)
    if database_url:
        env["DATABASE_URL"] = database_url
    cpu, wall = _cpu_of_children(), time.perf_counter()
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--no-input", "-v", "0"],
        env=env,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - wall, _cpu_of_children() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()

    cluster = None
    if args.postgres:
        import psycopg

        from tests.services import Postgres

        cluster = Postgres().start()
    times = []
    with tempfile.TemporaryDirectory(prefix="malamar-bench-migrate-") as root:
        for run in range(args.runs):
            url = None
            if cluster:
                name = f"bench_{uuid.uuid4().hex[:12]}"
                with psycopg.connect(cluster.url(), autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
                url = cluster.url(name)
            times.append(migrate_once(Path(root) / f"data-{run}", url))
    walls, cpus = zip(*times, strict=True)
    database = "PostgreSQL" if cluster else "SQLite"
    print(f"migrate from zero on {database}, {args.runs} runs (load {os.getloadavg()[0]:.2f})")
    for label, values in (("wall", walls), ("CPU", cpus)):
        each = ", ".join(f"{value:.2f}" for value in values)
        print(f"  {label}: median {statistics.median(values):.2f} s  ({each})")


if __name__ == "__main__":
    main()
