"""Cost of live activity: a CLI streaming 10,000 events through process.run + RunRecorder.

Prints the worker-side CPU time (this process: reader thread, parsing, batching) and the number
of database writes. Targets: under 2 s of CPU and under 1,000 writes for 10,000 events.

    .venv/bin/python bench/activity.py [--events 10000]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["MALAMAR_DATA_DIR"] = tempfile.mkdtemp(prefix="malamar-bench-")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from runner.clis.base import Command  # noqa: E402
from runner.recorder import RunRecorder  # noqa: E402
from worker import process  # noqa: E402
from workspaces.services import workspace_create  # noqa: E402

SAMPLE = ROOT.parent / "shared" / "cli-samples" / "codex_exec_json_cmd.jsonl"
EMITTER = """
import sys
lines = open(sys.argv[1]).read().splitlines()
for n in range(int(sys.argv[2])):
    sys.stdout.write(lines[n % len(lines)] + "\\n")
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=10_000)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    workspace = workspace_create(title="bench")
    writes = []

    def count_writes(execute, sql, params, many, context):
        if not sql.lstrip().upper().startswith(("SELECT", "PRAGMA", "SAVEPOINT", "RELEASE")):
            writes.append(sql)
        return execute(sql, params, many, context)

    recorder = RunRecorder(
        cli_type="codex", workspace_id=workspace.id, agent_id=None, agent_name="bench"
    )
    command = Command([sys.executable, "-c", EMITTER, str(SAMPLE), str(args.events)])
    cpu, wall = time.process_time(), time.time()
    with connection.execute_wrapper(count_writes):
        result = process.run(
            command,
            cwd=tempfile.gettempdir(),
            env=dict(os.environ),
            stop=process.RunStop(),
            on_line=recorder.on_line,
            on_output=recorder.on_output,
            on_tick=recorder.tick,
            tick_due=recorder.tick_due,
        )
        recorder.finish(status="completed", exit_code=result.exit_code)
    cpu, wall = time.process_time() - cpu, time.time() - wall
    traces = recorder.run.traces.count()
    print(f"events streamed: {args.events} lines → {traces} traces stored")
    print(f"worker CPU: {cpu:.2f} s (target < 2 s), wall {wall:.2f} s")
    print(f"database writes: {len(writes)} (target < 1000)")


if __name__ == "__main__":
    main()
