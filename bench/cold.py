"""How much slower Malamar's own code runs right after a CLI's run than when it is repeated
(issue 28: why the step between two agents costs several times its hot-loop time).

One piece of that step, in-process: reading a Codex answer (worker.execution.interpret on the
C stand-in's stdout and answer file: parse its events, read the file, check its JSON). Printed,
p50 over `--repeat` calls each:
- hot: called over and over;
- after the process slept N ms (as the worker does while a CLI works), first call;
- after it busy-waited N ms instead (its CPU never idle): if this is as slow, the caches were
  lost to time (the machine's other work), not to the CPU's sleep;
- after a sleep, the calls that follow the first one (how fast it warms up again).

    .venv/bin/python bench/cold.py [--repeat 40]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pages import setup_django  # noqa: E402

STDOUT = (
    '{"type":"thread.started","thread_id":"bench"}\n'
    '{"type":"turn.completed","usage":{"input_tokens":1,"output_tokens":1}}\n'
)
PAUSES_MS = (0.1, 1, 5, 20, 100)


def busy_wait(seconds: float) -> None:
    ends = time.perf_counter() + seconds
    while time.perf_counter() < ends:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=40)
    args = parser.parse_args()
    setup_django(Path(tempfile.mkdtemp(prefix="malamar-cold-")))
    from runner.clis import cli_for
    from worker import execution, process

    answer = Path(tempfile.mkdtemp(prefix="malamar-cold-")) / "answer.json"
    answer.write_text('{"actions":[{"type":"skip"}]}')
    result = process.ProcessResult(started_at=time.time())
    result.stdout, result.stderr, result.exit_code = STDOUT, "", 0
    result.stdout_bytes = len(STDOUT)
    cli = cli_for("codex")

    def timed() -> float:
        started = time.perf_counter()
        run = execution.interpret(cli, result, answer)
        took = (time.perf_counter() - started) * 1000
        assert run.data == {"actions": [{"type": "skip"}]}, run.error
        return took

    hot = [timed() for _ in range(args.repeat * 50)]
    print(f"load average {os.getloadavg()[0]:.2f}; a Codex answer read (p50 of {args.repeat})")
    print(f"  hot, called over and over      {statistics.median(hot):.4f} ms")
    for pause_ms in PAUSES_MS:
        pause = pause_ms / 1000
        slept, waited = [], []
        for _ in range(args.repeat):
            time.sleep(pause)
            slept.append(timed())
            busy_wait(pause)
            waited.append(timed())
        print(
            f"  after {pause_ms:>5} ms: slept {statistics.median(slept):.4f} ms,"
            f" busy-waited {statistics.median(waited):.4f} ms"
        )
    calls = []
    for _ in range(args.repeat):
        time.sleep(0.1)
        calls.append([timed() for _ in range(4)])
    again = "  ".join(f"{statistics.median(c[i] for c in calls):.4f}" for i in range(4))
    print(f"  after 100 ms slept, calls 1-4: {again} ms")


if __name__ == "__main__":
    main()
