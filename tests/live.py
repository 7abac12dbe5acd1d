"""Helpers to run real Malamar processes (server, worker, scripts) against a temp data dir."""

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from tests import databases

ROOT = Path(__file__).resolve().parent.parent
FAKES_BIN = ROOT / "tests" / "fakes" / "bin"  # the fake CLIs (tests/fakes/fakecli.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_env(data_dir: Path, **extra) -> dict:
    """The environment of a Malamar process on `data_dir`: its SQLite file, or on PostgreSQL
    runs its own database (tests.databases), never the test process's; a DATABASE_URL in
    `extra` (a scaled-out cluster's shared database) is used as given, no other is created."""
    env = dict(os.environ)
    env.pop("MALAMAR_TESTING", None)
    env.pop("DATABASE_URL", None)
    if databases.ON_POSTGRES and "DATABASE_URL" not in extra:
        env["DATABASE_URL"] = databases.url_for(data_dir)
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "malamar_site.settings",
            "MALAMAR_DATA_DIR": str(data_dir),
            "PYTHONPATH": str(ROOT),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def blank_database(data_dir: Path) -> Path:
    """An (empty) database file up front: migrating it is not a first launch, so no sample
    workspace is seeded."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "malamar.db"
    path.touch()
    return path


def manage(data_dir: Path, *args: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=process_env(data_dir, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def django_script(data_dir: Path, code: str, **env) -> subprocess.CompletedProcess:
    """Run Python code in a separate process with Django set up for `data_dir`."""
    prelude = "import django; django.setup()\n"
    result = subprocess.run(
        [sys.executable, "-c", prelude + code],
        env=process_env(data_dir, **env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result


def serving(url: str) -> bool:
    """The server at `url` (http://host:port) answers /api/health with 200."""
    try:
        return requests.get(f"{url}/api/health", timeout=1).status_code == 200
    except requests.RequestException:
        return False


def start_malamar(data_dir: Path, cwd: Path, *args: str, **env) -> subprocess.Popen:
    """The `malamar` command (server and worker) on `data_dir`; its output (text) in stdout."""
    return subprocess.Popen(
        [sys.executable, "-m", "malamar_site.cli", *args],
        env=process_env(data_dir, **env),
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


class Server:
    def __init__(self, data_dir: Path, port: int | None = None, log: Path | None = None, **env):
        self.data_dir = data_dir
        self.port = port or free_port()
        self.log = log  # where the server's stdout (its log) goes; dropped when None
        self.env = env
        self.proc = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Server":
        cmd = [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port)]
        stdout = self.log.open("ab") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [*cmd, "malamar_site.asgi:application"],
            env=process_env(self.data_dir, **self.env),
            cwd=ROOT,
            stdout=stdout,
            stderr=subprocess.PIPE,
        )
        if self.log:
            stdout.close()
        try:
            wait_until(self._ready, timeout=START, what="server to answer /api/health")
        except BaseException:
            self.stop()  # a server that never answered is not left running after its test
            raise
        return self

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited: {self.proc.stderr.read().decode()[-2000:]}")
        return serving(self.url)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# How long `malamar` on a new data dir may take to serve: it runs every migration first (about
# 5 s on an idle 2-core machine, ten times that when the machine is saturated). Only a broken
# start waits this long.
FIRST_START = 120.0
# How long a server or worker on a migrated database may take to be ready: a second on an idle
# machine, past 20 s at a load of 30 (a shorter limit failed tests there). Only a broken start,
# one that neither serves nor exits, waits this long.
START = 120.0


def wait_until(check, *, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class SseClient:
    """Reads /api/events in a thread; `events` holds (id, type, data, received_at)."""

    def __init__(self, url: str, last_event_id: str | None = None):
        host_port = url.split("://", 1)[1]
        host, port = host_port.split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)
        headers = {"Accept": "text/event-stream"}
        if last_event_id:
            headers["Last-Event-ID"] = last_event_id
        self.conn.request("GET", "/api/events", headers=headers)
        self.response = self.conn.getresponse()
        self.events: list[tuple[str | None, str, dict | None, float]] = []
        self.opened = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        assert self.opened.wait(10), "stream did not open"

    def _read(self) -> None:
        event_id, event_type, data = None, None, []
        try:
            while True:
                raw = self.response.readline()
                if not raw:
                    return
                line = raw.decode().rstrip("\r\n")
                if line.startswith("id: "):
                    event_id = line[4:]
                elif line.startswith("event: "):
                    event_type = line[7:]
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
                elif line == "":
                    if event_type == "stream-open":
                        self.opened.set()
                    elif event_type and event_type != "keep-alive":
                        payload = json.loads("\n".join(data)) if any(data) else None
                        self.events.append((event_id, event_type, payload, time.time()))
                    event_id, event_type, data = None, None, []
        except Exception:  # closed under our feet by close(): the stream simply ends
            return

    def of_type(self, event_type: str) -> list:
        return [e for e in self.events if e[1] == event_type]

    def close(self) -> None:
        # Shut the socket down so the reader thread returns now, not at the next keep-alive.
        with contextlib.suppress(OSError):
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


class FreezableProxy:
    """A TCP relay to host:port (a database) that can stop answering without closing anything,
    as a server that hangs or a network that drops packets does: `freeze()`. With
    `reply_delay`, every answer reaches the client that many seconds late (a loaded machine or
    a slow network); `requested` holds what the clients sent."""

    def __init__(self, host: str, port: int, reply_delay: float = 0):
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frozen = threading.Event()
        self.sockets: list[socket.socket] = []
        self.reply_delay = reply_delay
        self.requested = bytearray()

    def start(self) -> "FreezableProxy":
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.target)
                self.sockets += [client, upstream]
                requests = (client, upstream, self.requested, 0)
                replies = (upstream, client, None, self.reply_delay)
                threading.Thread(target=self._pump, args=requests, daemon=True).start()
                threading.Thread(target=self._pump, args=replies, daemon=True).start()

    def _pump(self, source, target, seen: bytearray | None, delay: float) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if self.frozen.is_set():
                    self.frozen.wait()
                    return  # the bytes are swallowed: nothing ever answers again
                if seen is not None:
                    seen += data
                time.sleep(delay)
                target.sendall(data)

    def freeze(self) -> None:
        self.frozen.set()

    def close(self) -> None:
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                sock.close()
