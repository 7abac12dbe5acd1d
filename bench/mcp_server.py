"""`malamar mcp` speed, measured from outside with the MCP SDK's own client.

    .venv/bin/python bench/mcp_server.py               # a workspace of 2,000 tasks
    .venv/bin/python bench/mcp_server.py --tasks 500
    .venv/bin/python bench/mcp_server.py --initialize-only --starts 9
    .venv/bin/python bench/mcp_server.py --initialize-only --source /tmp/older-checkout

Black box: a temp data dir, migrated and filled through the services (tasks with a
few words of summary and a paragraph of description drawn from a small vocabulary), then the
server started as an agent CLI starts it (the command Malamar's runs configure), over stdio.

Measured:
- initialize: process start → the answer to `initialize` (what Claude Code and Codex wait for
  before their first request), and the CPU time the server spent until then; median of
  --starts starts. `--source DIR` runs the server from another checkout (e.g. `git archive` of
  an older commit) for a before/after on the same machine and data.
- start: process start → tools listed (what a CLI waits for before its first turn)
- each tool: median and slowest of N calls (search with and without a text filter, get, related)
- related_tasks alone, in-process: rank_similar over the workspace's texts
"""

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from mcp import Client, StdioServerParameters

from tasks.similarity import rank_similar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VOCABULARY = """
login page crash safari cookie banner dark theme settings export csv report invoice search index
slow query cache redis email webhook retry upload avatar resize mobile menu button color
accessibility keyboard focus trap modal dialog api token refresh session timeout payment stripe
refund locale translation date format timezone chart legend
"""
WORDS = VOCABULARY.split()

SEED = """
import json, random, sys
from core.actors import USER
from tasks.services import comment_create, task_create
from workspaces.services import workspace_create

random.seed(7)
words = sys.argv[2].split()
ws = workspace_create(title="Bench")
ids = []
for n in range(int(sys.argv[1])):
    summary = " ".join(random.choices(words, k=6)).capitalize()
    description = " ".join(random.choices(words, k=60))
    task = task_create(workspace=ws, summary=summary, description=description)
    ids.append(task.id)
    if n % 10 == 0:
        comment_create(task=task, content=" ".join(random.choices(words, k=30)), actor=USER)
print(json.dumps({"workspace": ws.id, "tasks": ids}))
"""


def env_for(data_dir: Path, source: Path = ROOT) -> dict:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "malamar_site.settings",
        "MALAMAR_DATA_DIR": str(data_dir),
        "PYTHONPATH": str(source),
    }


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "0"},
    },
}


def initialize_once(data_dir: Path, workspace: str, source: Path) -> tuple[float, float]:
    """(wall, CPU) seconds from the server's start to its answer to `initialize`, written to
    its stdin at once, as a CLI does."""
    command = [sys.executable, "-P", "-m", "malamar_site.cli", "mcp", f"--workspace={workspace}"]
    started = time.perf_counter()
    server = subprocess.Popen(
        command,
        cwd=source,
        env=env_for(data_dir, source),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        server.stdin.write((json.dumps(INITIALIZE) + "\n").encode())
        server.stdin.flush()
        answer = server.stdout.readline()
        wall = time.perf_counter() - started
        times = psutil.Process(server.pid).cpu_times()
        assert json.loads(answer)["result"]["serverInfo"]["name"] == "malamar", answer
        return wall, times.user + times.system
    finally:
        server.kill()
        server.wait()


def initialize_times(data_dir: Path, workspace: str, starts: int, source: Path) -> dict:
    found = [initialize_once(data_dir, workspace, source) for _ in range(starts)]
    return {"wall": [w for w, _ in found], "cpu": [c for _, c in found]}


def prepare(data_dir: Path, count: int) -> dict:
    env = env_for(data_dir)
    subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "-v", "0"], env=env, check=True
    )
    code = "import django; django.setup()\n" + SEED
    done = subprocess.run(
        [sys.executable, "-c", code, str(count), " ".join(WORDS)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


async def measure(data_dir: Path, seeded: dict, calls: int) -> dict:
    workspace, tasks = seeded["workspace"], seeded["tasks"]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-P", "-m", "malamar_site.cli", "mcp", f"--workspace={workspace}"],
        env=env_for(data_dir),
    )
    results: dict[str, list[float]] = {}
    started = time.perf_counter()
    async with Client(params) as client:
        await client.list_tools()
        results["start (to tools listed)"] = [time.perf_counter() - started]
        rng = random.Random(1)
        plans = {
            "search_tasks (50 newest)": lambda: {},
            "search_tasks query": lambda: {"query": rng.choice(WORDS)},
            "get_task": lambda: {"task_id": rng.choice(tasks)},
            "related_tasks": lambda: {"task_id": rng.choice(tasks)},
        }
        for label, arguments in plans.items():
            name = label.split()[0]
            for _ in range(calls):
                t0 = time.perf_counter()
                result = await client.call_tool(name, arguments())
                results.setdefault(label, []).append(time.perf_counter() - t0)
                assert not result.is_error, result.content
    return results


def rank_alone(count: int) -> tuple[float, float]:
    """(wall, CPU) seconds of one ranking, the best of 5 (the CPU time ignores the load)."""
    rng = random.Random(7)
    documents = [(str(n), " ".join(rng.choices(WORDS, k=66))) for n in range(count)]
    best = (float("inf"), float("inf"))
    for _ in range(5):
        wall, cpu = time.perf_counter(), time.process_time()
        rank_similar(documents[0][1], documents[1:], limit=5)
        best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--starts", type=int, default=7, help="starts timed to `initialize`")
    parser.add_argument("--initialize-only", action="store_true", help="skip the tool calls")
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout to serve from")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="malamar-bench-mcp-") as folder:
        data_dir = Path(folder) / "data"
        data_dir.mkdir()
        (data_dir / "malamar.db").touch()  # not a first launch: no sample workspace
        seeded = prepare(data_dir, args.tasks)
        started = initialize_times(data_dir, seeded["workspace"], args.starts, args.source)
        results = {} if args.initialize_only else asyncio.run(measure(data_dir, seeded, args.calls))
    print(f"malamar mcp, a workspace of {args.tasks} tasks (load average {load:.2f})")
    print(f"  served from {args.source}")
    wall, cpu = ([t * 1000 for t in started[key]] for key in ("wall", "cpu"))
    print(
        f"  {'initialize answered':28} median {statistics.median(wall):7.0f} ms "
        f"(fastest {min(wall):.0f}, slowest {max(wall):.0f}; {len(wall)} starts), "
        f"CPU until then median {statistics.median(cpu):.0f} ms"
    )
    for label, times in results.items():
        ms = [t * 1000 for t in times]
        if len(ms) == 1:
            print(f"  {label:28} {ms[0]:8.0f} ms")
        else:
            print(f"  {label:28} median {statistics.median(ms):7.1f} ms, slowest {max(ms):7.1f} ms")
    wall, cpu = rank_alone(args.tasks)
    print(f"  rank_similar in-process      {wall * 1000:8.1f} ms ({cpu * 1000:.1f} ms CPU)")


if __name__ == "__main__":
    main()
