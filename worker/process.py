"""The one place that starts processes: every CLI run and health check goes through `run()`.

Each process starts in a session (and process group) of its own, so a stop kills the CLI and
everything it started. Output is kept only up to a cap (a CLI printing 100 MB must not grow the
worker), standard input is /dev/null unless the command brings its own.
"""

import collections
import contextlib
import logging
import os
import re
import selectors
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil

from core.storable import storable_text
from runner.clis.base import Command

log = logging.getLogger(__name__)

STDOUT_CAP = 4 * 1024 * 1024
STDERR_CAP = 256 * 1024
READ_CHUNK = 64 * 1024
# How often a run's watch looks again while its CLI prints (its `on_tick`: trace batches, at
# most ~4 a second), and how often it looks at a `stop` that cannot wake it (a plain
# threading.Event, not a RunStop). A quiet run with a RunStop sleeps until something happens.
BUSY_TICK_SECONDS = 0.25
PLAIN_STOP_CHECK_SECONDS = 0.1
KILLED_EXIT_SECONDS = 5.0  # a killed process's end, waited for
OUTPUT_AFTER_EXIT_SECONDS = 2.0  # its pipes' end after its exit, waited for


class RunStop(threading.Event):
    """A run's stop request that wakes the run's watch (Held.wait) the moment it is set: a
    hundred quiet runs cost nothing while they wait, instead of a check every few milliseconds
    each."""

    def __init__(self):
        super().__init__()
        self._guard = threading.Lock()
        self._woken: dict = {}  # what it wakes (the watches of its runs) → the process followed

    def set(self) -> None:
        super().set()
        with self._guard:
            woken = list(self._woken)
        for event in woken:
            event.set()

    def wakes(self, event, started: "Started | None" = None) -> None:
        """Set `event` too when this stop is set (at once if it is already); `started`: the
        process that the watch follows (see kill_followed)."""
        with self._guard:
            self._woken[event] = started
        if self.is_set():
            event.set()

    def forget(self, event) -> None:
        with self._guard:
            self._woken.pop(event, None)

    def kill_followed(self) -> int:
        """Kill the processes still followed: their run thread did not act on this stop (it
        waits for a database that does not answer, e.g. saving the traces), and a stopping
        worker must not leave an agent editing the project. Returns how many were signalled."""
        with self._guard:
            followed = [started for started in self._woken.values() if started is not None]
        return sum(
            kill_tree(started.pid, pgid=started.pgid, create_time=started.create_time)
            for started in followed
        )


@dataclass(frozen=True)
class Started:
    pid: int
    pgid: int
    create_time: float


@dataclass
class ProcessResult:
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stopped: bool = False
    timed_out: bool = False
    stalled: bool = False
    start_error: str | None = None
    stdout_bytes: int = 0
    started_at: float = 0.0
    ended_at: float = 0.0

    @property
    def duration(self) -> float:
        return self.ended_at - self.started_at


class _Tail:
    """Keeps the last `cap` bytes of a stream and counts the whole."""

    def __init__(self, cap: int):
        self.cap = cap
        self.chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.size += len(chunk)
        self.total += len(chunk)
        while self.size - len(self.chunks[0]) >= self.cap:
            self.size -= len(self.chunks.popleft())

    def text(self) -> str:
        data = b"".join(self.chunks)[-self.cap :]
        return storable_text(data)


LINE_CAP = 1024 * 1024


class _Lines:
    """Splits a stream's chunks into complete lines for `on_line` as they arrive; a line past
    LINE_CAP is dropped whole (memory stays bounded, and its tail never reaches the parser as a
    line of its own: it could hold a whole event)."""

    def __init__(self, on_line: Callable[[str], None] | None):
        self.on_line = on_line
        self.partial, self.skipping = b"", False

    def feed(self, chunk: bytes) -> None:
        if self.on_line is None:
            return
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        if self.skipping and lines:  # the end of a runaway line: dropped with the rest of it
            lines, self.skipping = lines[1:], False
        for line in lines:
            self.on_line(storable_text(line))
        if len(self.partial) > LINE_CAP:  # a runaway line: not a JSON event anyway
            self.partial, self.skipping = b"", True

    def end(self) -> None:
        if self.on_line and self.partial.strip() and not self.skipping:
            self.on_line(storable_text(self.partial))
        self.partial = b""


# The gate every process passes (DESIGN "Processes"): the POSIX shell, in a session (and process
# group) of its own, with the command's environment. It waits for the worker's go on its
# standard input: one line, the command itself as shell words (`_go_line`: into the command's
# folder, its PWD, /dev/null as stdin unless it brings its own, then `exec` it: same pid, same
# group), read byte by byte by `read` (nothing past it: the rest of that input is the
# command's). A command without input gets its line after an empty one (GO_AS_A_FILE): the gate
# then reads the rest of the pipe as a file, in one read (the line as before where /dev/stdin
# cannot be opened). The worker records the process first, so recovery knows every CLI that
# ever ran; a worker killed before its go closes the pipe, and the gate exits without running
# anything.
# The command's program is checked before (a missing or non-executable one is a start error, as
# Popen's would be); `command read` skips any function of that name from the environment.
# Since the gate does not depend on the command, the next run's gate is started while a run
# works (`Spares`): starting a process in a new session costs 0.2 ms on a quiet machine but
# 4-6 ms on a busy one (the new session's scheduling group waits for a CPU), and the shell's
# own start-up is off the path between two agents too.
GATE = """nl='
'
command read -r go || exit 125
case $go in
'') command . /dev/stdin || { command read -r go && eval "$go"; } ;;
*) eval "$go" ;;
esac
exit 125
"""
GO_AS_A_FILE = b"\n"  # (one byte for `read`, which takes a pipe byte by byte)
GATE_SHELL = "/bin/sh"
GATE_EXITED = 125  # the gate's exit when it never got its go
SPARES_KEPT = 4  # gates kept started ahead (about one per workspace running at once)
SPARE_WAIT_SECONDS = 1.0  # a run waits this long at most for its spare being started
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _shell_word(text: str) -> str:
    """`text` as one shell word on one line (a newline in it becomes "$nl", the gate's)."""
    if "\0" in text:
        raise ValueError("embedded null byte")
    return '"$nl"'.join(shlex.quote(part) for part in text.split("\n"))


def _go_line(command: Command, *, cwd: str, env: dict[str, str]) -> bytes:
    """The gate's go: the command, run in `cwd` with the PWD (and OLDPWD) of `env`."""
    words = [f"command cd -P -- {_shell_word(cwd)} || exit 125"]
    for name in ("PWD", "OLDPWD"):  # (cd set them: the environment's values win)
        value = env.get(name)
        words.append(f"unset {name}" if value is None else f"export {name}={_shell_word(value)}")
    if command.stdin is None:
        words.append("exec </dev/null")
    words.append("exec " + " ".join(_shell_word(arg) for arg in command.argv))
    line = ("; ".join(words) + "\n").encode()
    # Nothing but the go comes on its standard input: the gate reads the line as a file, in one
    # read (`read` takes a pipe byte by byte: ~0.2 ms of an agent's start for its ~600 bytes).
    return GO_AS_A_FILE + line if command.stdin is None else line


def _gate_env(env: dict[str, str]) -> dict[str, str] | None:
    """What a gate is started with (the go line sets PWD and OLDPWD): None when a name is not
    one the shell can hold (no gate is started ahead for such an environment)."""
    if not all(_SHELL_NAME.fullmatch(name) for name in env):
        return None
    return {name: value for name, value in env.items() if name not in ("PWD", "OLDPWD")}


def _start_gate(cwd: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [GATE_SHELL, "-c", GATE, "malamar-gate"],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        close_fds=True,
    )


def _end_gate(proc: subprocess.Popen, create_time: float) -> None:
    """A gate that never got its go: its pipe closed, it exits by itself (reaped here)."""
    with contextlib.suppress(OSError):
        proc.stdin.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)
    if proc.poll() is None:
        kill_tree(proc.pid, pgid=proc.pid, create_time=create_time)
        proc.wait()
    for stream in (proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            stream.close()


class Spares:
    """Gates started ahead, waiting for a go: a run whose environment matches one takes it
    instead of starting a process (see GATE). Each agent run asks for one for the next run with
    its environment (`refill`, once its CLI runs), started by a thread of its own so that the run
    is followed at once; a run that comes while its spare is being started waits for that one
    (it is nearly there). At most SPARES_KEPT wait, the oldest ended first. A spare nobody takes
    costs a sleeping shell; a worker killed meanwhile closes its pipe and it exits. `clear()`
    ends them all (the worker stopping)."""

    def __init__(self):
        self._lock = threading.Condition()
        self._waiting: list[tuple[dict, subprocess.Popen, float]] = []
        self._wanted: list[dict] = []  # environments asked for, not started yet
        self._starting: list[dict] = []  # ...being started
        self._generation = 0  # moved on by clear(): a gate started before is not kept
        self._maker: threading.Thread | None = None

    def take(self, env: dict[str, str]) -> tuple[subprocess.Popen, float] | None:
        gate_env = _gate_env(env)
        if gate_env is None:
            return None
        gives_up = time.monotonic() + SPARE_WAIT_SECONDS
        with self._lock:
            while True:
                for index, (spare_env, proc, create_time) in enumerate(self._waiting):
                    if spare_env == gate_env and proc.poll() is None:
                        del self._waiting[index]
                        return proc, create_time
                coming = gate_env in self._wanted or gate_env in self._starting
                if not coming or not self._lock.wait(gives_up - time.monotonic()):
                    return None

    def refill(self, env: dict[str, str]) -> None:
        gate_env = _gate_env(env)
        if gate_env is None:
            return
        with self._lock:
            if gate_env not in self._wanted:
                self._wanted.append(gate_env)
            if self._maker is None or not self._maker.is_alive():
                self._maker = threading.Thread(target=self._make, name="malamar-gates", daemon=True)
                self._maker.start()
            self._lock.notify_all()

    def _make(self) -> None:
        while True:
            with self._lock:
                while not self._wanted:
                    self._lock.wait()
                env = self._wanted.pop(0)
                self._starting.append(env)
            try:
                self._add(env)
            finally:
                with self._lock:
                    self._starting.remove(env)
                    self._lock.notify_all()

    def add(self, env: dict[str, str]) -> None:
        """Start a spare gate for `env` now, in this thread."""
        gate_env = _gate_env(env)
        if gate_env is not None:
            self._add(gate_env)

    def _add(self, gate_env: dict[str, str]) -> None:
        generation = self._generation
        try:
            proc = _start_gate("/", gate_env)
        except OSError:
            return
        spare = (gate_env, proc, _create_time(proc.pid))
        with self._lock:
            if generation == self._generation:
                self._waiting.append(spare)
                ended = self._waiting[:-SPARES_KEPT]
                del self._waiting[:-SPARES_KEPT]
                self._lock.notify_all()
            else:
                ended = [spare]
        for _env, old, create_time in ended:
            _end_gate(old, create_time)

    def waiting(self) -> list[int]:
        """The pids of the spare gates waiting now."""
        with self._lock:
            return [proc.pid for _env, proc, _time in self._waiting]

    def clear(self) -> None:
        with self._lock:
            self._generation += 1
            self._wanted.clear()
            ended, self._waiting = self._waiting, []
        for _env, proc, create_time in ended:
            _end_gate(proc, create_time)


spares = Spares()


def _close_fds(*fds: int) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


# What an executable file starts with: a script's "#!", or a binary's magic (ELF; Mach-O, fat).
EXECUTABLE_STARTS = (
    b"#!",
    b"\x7fELF",
    b"\xfe\xed\xfa\xce",
    b"\xfe\xed\xfa\xcf",
    b"\xce\xfa\xed\xfe",
    b"\xcf\xfa\xed\xfe",
    b"\xca\xfe\xba\xbe",
)


def _program_problem(program: str, *, cwd: str, env: dict[str, str]) -> str | None:
    """Why `program` cannot be executed, as execvpe would say it (None: it can): a name
    without a slash is looked up in the command's PATH. A file that is neither a script nor a
    binary is refused here: the gate's `exec` would run it as a shell script (POSIX's fallback
    for ENOEXEC), where Popen said "Exec format error"."""
    if "/" not in program:
        path = shutil.which(program, path=env.get("PATH", os.defpath))
        if path is None:
            return f"No such file or directory: {program}"
    else:
        path = os.path.join(cwd, os.path.expanduser(program))
        if not os.path.exists(path):
            return f"No such file or directory: {program}"
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            return f"Permission denied: {program}"
    try:
        with open(path, "rb") as file:
            start = file.read(4)
    except OSError:  # executable but not readable (a binary can be): exec will tell
        return None
    if not start.startswith(EXECUTABLE_STARTS):
        return f"Exec format error: {program}"
    return None


def _exec_failure(result: ProcessResult, program: str) -> str | None:
    """The start error of a command the gate could not exec (its program removed, or its mode
    changed, after the check before its go), as Popen says it; None: it ran. Told by the gate
    shell's own words about this very program and nothing else on stdout or stderr."""
    if result.exit_code not in (126, 127) or result.stdout:
        return None
    words = rf"malamar-gate: \d+: exec: {re.escape(program)}: (not found|Permission denied)\n?"
    failed = re.fullmatch(words, result.stderr)
    if failed is None:
        return None
    why = "No such file or directory" if failed[1] == "not found" else "Permission denied"
    return f"{why}: {program}"


@contextlib.contextmanager
def followed(stop: threading.Event | None, started: "Started"):
    """While a released command is not watched yet (its start is being written): a stopping
    worker's RunStop.kill_followed still ends it if that write hangs on a database that does
    not answer."""
    if not isinstance(stop, RunStop):
        yield
        return
    marker = threading.Event()
    stop.wakes(marker, started)
    try:
        yield
    finally:
        stop.forget(marker)


class Held:
    """A process forked and waiting at its gate: `started` says which (record it), then
    `release()` lets the command run and `wait()` follows it to its end; `cancel()` ends it
    without ever running the command. `start_error` when there is nothing to run."""

    def __init__(self, command: Command, *, cwd: str, env: dict[str, str], spare: bool = False):
        self.command = command
        self.result = ProcessResult(started_at=time.time())
        self.started: Started | None = None
        self.proc: subprocess.Popen | None = None
        self.env, self.spare = env, spare
        self._watch: _Watch | None = None  # ended, not reaped yet (wait's end_later)
        if not os.path.isdir(cwd):  # as Popen would say, before anything is started
            why = "Not a directory" if os.path.exists(cwd) else "No such file or directory"
            self.result.start_error = f"{why}: {cwd}"
            return
        problem = _program_problem(command.argv[0], cwd=cwd, env=env) if command.argv else None
        if problem or not command.argv:
            self.result.start_error = problem or "No command to run"
            return
        self.go = _go_line(command, cwd=os.path.abspath(cwd), env=env)
        taken = spares.take(env) if spare else None
        if taken is not None:
            self.proc, create_time = taken
        else:
            try:
                self.proc = _start_gate(cwd, _gate_env(env) or env)
            except OSError as exc:
                self.result.start_error = f"{exc.strerror or exc}: {exc.filename or cwd}"
                return
            create_time = _create_time(self.proc.pid)
        pid = self.proc.pid
        self.started = Started(pid=pid, pgid=pid, create_time=create_time)

    @property
    def start_error(self) -> str | None:
        return self.result.start_error

    def waiting(self) -> bool:
        """Its process is at its gate (started, not ended)."""
        return self.proc is not None and self.proc.poll() is None

    def release(self) -> None:
        """Let the command run (its standard input follows the go, written by wait()); then,
        for an agent run, start the gate of the next run (while this one works)."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.write(self.go)
            self.proc.stdin.flush()
        except OSError:  # the gate is gone: wait() finds it ended
            pass
        if self.command.stdin is None:  # the command reads /dev/null
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if self.spare:
            spares.refill(self.env)

    def end(self) -> None:
        """After `wait(end_later=True)`: reap the ended process and close its pipes."""
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()

    def cancel(self) -> None:
        """Never run the command: the gate closes and the process exits by itself."""
        if self.proc is None:
            return
        _end_gate(self.proc, self.started.create_time)

    def kill(self) -> None:
        """End a released command that nobody will follow (its start could not be written)."""
        if self.proc is None:
            return
        kill_tree(self.proc.pid, pgid=self.proc.pid, create_time=self.started.create_time)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILLED_EXIT_SECONDS)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def wait(
        self,
        *,
        stop: threading.Event | None = None,
        timeout: float | None = None,
        on_line: Callable[[str], None] | None = None,
        on_output: Callable[[], None] | None = None,
        on_tick: Callable[[], bool] | None = None,
        tick_due: Callable[[], float | None] | None = None,
        timeout_from_output: bool = False,
        on_error_line: Callable[[str], None] | None = None,
        end_later: bool = False,
    ) -> ProcessResult:
        """Follow the released command to completion, or until `stop` is set, `timeout`
        passes or `on_tick` returns True; then kill it. `on_line` and `on_error_line` get
        stdout's and stderr's complete lines as they arrive; `timeout_from_output`: see run().
        `end_later`: the ended process is reaped and its pipes closed by `end()`, not here
        (its exit status is read without reaping it: an agent's next CLI goes first).

        Nothing polls: this thread sleeps until the process exits, `stop` is set (a RunStop
        wakes it), the process prints (then `on_tick` runs at once and every
        BUSY_TICK_SECONDS while the output goes on) or `tick_due()` seconds have passed (when
        `on_tick` next has something to do on its own, e.g. a stall warning; None: never)."""
        result, proc = self.result, self.proc
        if proc is None or result.start_error:
            if proc is not None:
                proc.wait()
                self.cancel()
            result.ended_at = time.time()
            return result
        out, err = _Tail(STDOUT_CAP), _Tail(STDERR_CAP)
        first_output: list[float] = []  # monotonic time of the first output, once there is one

        def output() -> None:
            if not first_output:
                first_output.append(time.monotonic())
            if on_output:
                on_output()
            printed.note()

        watch = _Watch(proc, self.command.stdin, output)
        printed = _Printed(watch)
        watch.follow(proc.stdout, out, _Lines(on_line))
        watch.follow(proc.stderr, err, _Lines(on_error_line))
        wakes_us = isinstance(stop, RunStop)
        if wakes_us:
            stop.wakes(watch, self.started)
        started = time.monotonic()
        create_time = self.started.create_time
        try:
            while not watch.exited:
                ends = deadline(started, first_output[:1], timeout, from_output=timeout_from_output)
                if stop is not None and stop.is_set():
                    result.stopped = True
                elif ends is not None and time.monotonic() > ends:
                    result.timed_out = True
                elif on_tick is not None and on_tick():
                    result.stalled = True
                else:
                    waits = [printed.next_look(), ends and ends - time.monotonic()]
                    if tick_due is not None:
                        waits.append(tick_due())
                    elif on_tick is not None:
                        waits.append(BUSY_TICK_SECONDS)
                    if stop is not None and not wakes_us:
                        waits.append(PLAIN_STOP_CHECK_SECONDS)
                    known = [max(0.0, w) for w in waits if w is not None]
                    _sleep(watch, min(known) if known else None)
                    watch.clear()
                    continue
                kill_tree(proc.pid, pgid=proc.pid, create_time=create_time)
                watch.wait_exit(KILLED_EXIT_SECONDS)
                break
            # The CLI is gone. Anything it left in its process group is an orphan: end it too,
            # so no agent keeps editing after its run and nobody holds our pipes open. (A stop
            # or timeout above also scanned the session for descendants that moved to groups of
            # their own.)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            watch.finish_reading(OUTPUT_AFTER_EXIT_SECONDS)
        finally:
            if wakes_us:
                stop.forget(watch)
            if end_later:
                self._watch = watch
            else:
                watch.close()
        result.exit_code = watch.exit_code if watch.exit_code is not None else proc.poll()
        result.stdout, result.stderr = out.text(), err.text()
        result.stdout_bytes = out.total
        result.ended_at = time.time()
        result.start_error = _exec_failure(result, self.command.argv[0])
        return result


class _Watch:
    """Everything a followed process may wake its watch for, in one select() of the watching
    thread: its output (read here, into its tails and lines), its standard input being written,
    its end (a pidfd; where there is none, one thread waiting for it) and `set()`, from any
    thread (a RunStop, output after a silence). No reader threads: at the CLI's exit the
    thread that goes on to the next agent is the one woken."""

    def __init__(self, proc: subprocess.Popen, stdin: bytes | None, on_output: Callable):
        self.proc, self.on_output = proc, on_output
        self.selector = selectors.DefaultSelector()
        self.exited = False
        self.exit_code: int | None = None  # read at the pidfd's end, before the reaping
        self.woken = False
        self.reading: dict[int, tuple[_Tail, _Lines]] = {}  # by file descriptor
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self._woken)
        self.pidfd = _pidfd(proc.pid)
        if self.pidfd is not None:
            self.selector.register(self.pidfd, selectors.EVENT_READ, self._ended)
        else:
            threading.Thread(target=self._wait_in_a_thread, daemon=True).start()
        self.stdin = memoryview(stdin) if stdin is not None else None
        if self.stdin is not None and proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            self.selector.register(proc.stdin.fileno(), selectors.EVENT_WRITE, self._write)

    def follow(self, stream, tail: _Tail, lines: _Lines) -> None:
        fd = stream.fileno()
        os.set_blocking(fd, False)
        self.reading[fd] = (tail, lines)
        self.selector.register(fd, selectors.EVENT_READ, lambda: self._read(fd))

    # wake-ups (set: any thread) ----------------------------------------------------------------
    def set(self) -> None:
        self.woken = True
        with contextlib.suppress(OSError):  # (full: it wakes anyway)
            os.write(self.wake_w, b"w")

    def is_set(self) -> bool:
        return self.woken

    def clear(self) -> None:
        self.woken = False

    def wait(self, seconds: float | None) -> None:
        """Until woken, the process's end or `seconds` (None: no limit), reading meanwhile."""
        self._select_until(lambda: self.woken or self.exited, seconds)

    def wait_exit(self, seconds: float) -> None:
        self._select_until(lambda: self.exited, seconds)

    def finish_reading(self, seconds: float) -> None:
        """What the pipes still hold, to their end (a descendant that escaped its group may
        keep them open: not longer than `seconds`)."""
        self._select_until(lambda: not self.reading, seconds)

    def _select_until(self, done: Callable[[], bool], seconds: float | None) -> None:
        ends = None if seconds is None else time.monotonic() + seconds
        timeout = seconds
        while not done():
            for key, _mask in self.selector.select(timeout):
                key.data()
            if ends is not None:
                timeout = ends - time.monotonic()
                if timeout <= 0:
                    return

    # what select() found ------------------------------------------------------------------------
    def _woken(self) -> None:
        with contextlib.suppress(OSError):
            while os.read(self.wake_r, 4096):
                pass

    def _ended(self) -> None:
        self.selector.unregister(self.pidfd)
        self.exit_code = _exit_status(self.pidfd)  # (reaped by close(): the kernel frees the
        self.exited = True  # process then, ~0.1 ms, off the path to an agent's next CLI)

    def _wait_in_a_thread(self) -> None:
        self.proc.wait()
        self.exited = True
        self.set()

    def _read(self, fd: int) -> None:
        tail, lines = self.reading[fd]
        try:
            chunk = os.read(fd, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:  # the end of the stream
            self.selector.unregister(fd)
            del self.reading[fd]
            lines.end()
            return
        tail.add(chunk)
        self.on_output()
        lines.feed(chunk)

    def _write(self) -> None:
        fd = self.proc.stdin.fileno()
        try:
            self.stdin = self.stdin[os.write(fd, self.stdin) :]
        except BlockingIOError:
            return
        except OSError:  # it does not read its input (any more)
            self.stdin = self.stdin[:0]
        if not self.stdin:
            self.selector.unregister(fd)
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def close(self) -> None:
        if self.exited:
            self.proc.wait()  # (it exited: reaped at once)
        self.selector.close()
        _close_fds(self.wake_r, self.wake_w, *([self.pidfd] if self.pidfd is not None else []))
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def _exit_status(pidfd: int) -> int | None:
    """The exit code of the ended process `pidfd` refers to, as Popen's returncode says it (a
    signal's number negated), left unreaped; None if it cannot be read (close() reaps it)."""
    try:
        info = os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT | os.WNOHANG)
    except (AttributeError, OSError):
        return None
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _pidfd(pid: int) -> int | None:
    """A file descriptor that becomes readable when `pid` exits (Linux 5.3+), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _sleep(wake: "_Watch", seconds: float | None) -> None:
    """A run's watch waits here between looks (None: until woken), reading its output."""
    wake.wait(seconds)


class _Printed:
    """Output of a followed process, as a reason to look again: the first output after a quiet
    spell wakes the watch at once; while output goes on the watch looks every
    BUSY_TICK_SECONDS, not once per chunk."""

    def __init__(self, wake: "_Watch"):
        self.wake = wake
        self.count = 0
        self.seen = 0
        self.armed = True  # the next output wakes the watch

    def note(self) -> None:  # reader threads
        self.count += 1
        if self.armed:
            self.armed = False
            self.wake.set()

    def next_look(self) -> float | None:
        """Seconds until the watch should look again because of output (None: only when the
        next output comes)."""
        if self.count != self.seen:  # printing: look again soon, without a wake per chunk
            self.seen = self.count
            return BUSY_TICK_SECONDS
        self.armed = True
        if self.count != self.seen:  # printed while we re-armed
            self.seen = self.count
            return 0.0
        return None


def spawn(command: Command, *, cwd: str, env: dict[str, str], spare: bool = False) -> Held:
    """Fork `command`, held at its gate (see Held): nothing runs before `release()`.
    `spare`: an agent run, which takes a gate started ahead and leaves one for the next."""
    return Held(command, cwd=cwd, env=env, spare=spare)


def run(
    command: Command,
    *,
    cwd: str,
    env: dict[str, str],
    stop: threading.Event | None = None,
    timeout: float | None = None,
    on_line: Callable[[str], None] | None = None,
    on_output: Callable[[], None] | None = None,
    on_tick: Callable[[], bool] | None = None,
    tick_due: Callable[[], float | None] | None = None,
    timeout_from_output: bool = False,
    on_error_line: Callable[[str], None] | None = None,
) -> ProcessResult:
    """Run `command` to completion, or until `stop` is set, `timeout` passes or `on_tick`
    returns True (then kill it; see Held.wait for when it is called): a process
    nobody needs to record first (health checks, a worktree's setup command). `on_line` and
    `on_error_line` get stdout's and stderr's complete lines as they arrive.
    `timeout_from_output`: the timeout counts again from the process's first output (stdout or
    stderr), so the time a loaded machine takes to start it counts only until it prints."""
    held = spawn(command, cwd=cwd, env=env)
    held.release()
    return held.wait(
        stop=stop,
        timeout=timeout,
        on_line=on_line,
        on_output=on_output,
        on_tick=on_tick,
        tick_due=tick_due,
        timeout_from_output=timeout_from_output,
        on_error_line=on_error_line,
    )


def deadline(
    started: float, first_output: list[float], timeout: float | None, *, from_output: bool
) -> float | None:
    """When a process times out (monotonic seconds; None: never): `timeout` after its start,
    or with `from_output`, once it printed, `timeout` after its first output (`first_output`:
    [] or [when]). A process silent for the whole timeout times out either way."""
    if timeout is None:
        return None
    if from_output and first_output:
        return first_output[0] + timeout
    return started + timeout


def _create_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return time.time()


def _session_members(sid: int, not_before: float) -> list[psutil.Process]:
    """Processes still in the run's session (re-parented children included)."""
    members = []
    for proc in psutil.process_iter(["create_time"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["create_time"] >= not_before - 1:
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return members


def kill_tree(pid: int, *, pgid: int, create_time: float) -> int:
    """Kill a run's process group, its descendants (even in other groups) and anything left in
    its session. Returns how many processes were signalled. Safe if they are already gone."""
    targets: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(pid)
        if abs(root.create_time() - create_time) < 1:
            targets[root.pid] = root
            for child in root.children(recursive=True):
                targets[child.pid] = child
    except psutil.Error:
        pass
    for member in _session_members(pgid, create_time):
        targets[member.pid] = member
    if targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    for proc in targets.values():
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return len(targets)
