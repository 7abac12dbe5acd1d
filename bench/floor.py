"""The floor under the gap between two agents (issue 28) on this machine: orchestrators that do
nothing between two CLIs, timed with the same fake CLI in C as bench/gap.py.

    .venv/bin/python bench/floor.py [--runs 40] [--bun PATH] [--node PATH]

Each orchestrator runs the fake `--runs` times one after the other (as `codex exec -o FILE
PROMPT`, 100 ms each, BENCH_FAKE_SLEEP_MS) and starts the next one as soon as it sees the last
one's end; the gap is the fake's own exit timestamp to the next one's start timestamp
(BENCH_CLI_LOG), so it is the operating system's share (a process's end seen, a program
started) plus whatever the orchestrator does in between, here nothing:

  python, Malamar's gate        worker.process: the next CLI's gate started while the last one
                                runs (Held), its end seen through a pidfd (Held.wait), then the
                                go: what Malamar's worker does minus its own step
  python, Popen                 subprocess.Popen at the end seen by Popen.wait()
  bun, Bun.spawn                `await proc.exited`, then Bun.spawn (the original TypeScript
                                build's runtime and call), if --bun names a bun binary
  node, child_process.spawn     the same with Node, if --node names one (default: `node` on PATH)

Printed: the gap's p50, p90 and min per orchestrator, with the machine's load.
"""

import argparse
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.runner import compile_fake_cli, percentile  # noqa: E402

SLEEP_MS = "100"
JS_LOOP = """
const [binary, runs, out] = process.argv.slice(-3);
const argv = [binary, "exec", "-o", out, "floor"];
for (let n = 0; n < Number(runs); n++) {
  await new Promise((done) => {
    const child = RUN(argv);
    WAIT(child, done);
  });
}
"""
BUN = JS_LOOP.replace(
    "RUN(argv)", 'Bun.spawn(argv, { stdin: "ignore", stdout: "pipe", stderr: "pipe" })'
).replace("WAIT(child, done)", "child.exited.then(done)")
NODE = 'import { spawn } from "node:child_process";\n' + JS_LOOP.replace(
    "RUN(argv)", 'spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "pipe"] })'
).replace(
    "WAIT(child, done)",
    'child.stdout.resume(); child.stderr.resume(); child.on("exit", done)',
)


def gaps(log: Path) -> list[float]:
    """From one run's exit to the next one's start, in ms, in the order they ran."""
    lines = [line.split() for line in log.read_text().splitlines() if line.startswith("task ")]
    spans = sorted((float(start), float(end)) for _kind, start, end, *_rest in lines)
    return [(later[0] - earlier[1]) * 1000 for earlier, later in itertools.pairwise(spans)]


def malamar_gate(binary: Path, runs: int, out: Path, env: dict) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")
    from runner.clis.base import Command
    from worker import process

    def held():
        argv = [str(binary), "exec", "-o", str(out), "floor"]
        return process.Held(Command(argv=argv, stdin=None), cwd=str(out.parent), env=env)

    ready = held()
    for _ in range(runs):
        current, ready = ready, None
        current.release()
        ready = held()  # (the next one's gate, while this one runs)
        current.wait()
    ready.cancel()


def popen(binary: Path, runs: int, out: Path, env: dict) -> None:
    for _ in range(runs):
        proc = subprocess.Popen(
            [str(binary), "exec", "-o", str(out), "floor"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        proc.communicate()


def script(runtime: str, source: str):
    def run(binary: Path, runs: int, out: Path, env: dict) -> None:
        path = out.parent / "floor.mjs"
        path.write_text(source)
        subprocess.run([runtime, str(path), str(binary), str(runs), str(out)], env=env, check=True)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--bun", help="a bun binary (npm's `bun` package has one)")
    parser.add_argument("--node", default=shutil.which("node"))
    args = parser.parse_args()
    orchestrators = [("python, Malamar's gate", malamar_gate), ("python, Popen", popen)]
    if args.bun:
        orchestrators.append(("bun, Bun.spawn", script(args.bun, BUN)))
    if args.node:
        orchestrators.append(("node, child_process.spawn", script(args.node, NODE)))
    with tempfile.TemporaryDirectory(prefix="malamar-floor-") as folder:
        folder = Path(folder)
        binary = compile_fake_cli(folder)
        print(f"load average {os.getloadavg()[0]:.2f}; {args.runs} runs of {SLEEP_MS} ms each")
        for name, orchestrate in orchestrators:
            log = folder / "cli.log"
            log.unlink(missing_ok=True)
            env = {**os.environ, "BENCH_CLI_LOG": str(log), "BENCH_FAKE_SLEEP_MS": SLEEP_MS}
            orchestrate(binary, args.runs, folder / "answer.json", env)
            time.sleep(0.2)
            found = gaps(log)
            print(
                f"  {name:28} gap p50 {statistics.median(found):5.2f} ms"
                f"  p90 {percentile(found, 90):5.2f}  min {min(found):5.2f}  (n={len(found)})"
            )
        print(f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
