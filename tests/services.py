"""Real PostgreSQL and Redis for the tests, from Debian's packages, started by the test session.

Each runs as an unprivileged user (PostgreSQL refuses root; as root the tests use `nobody`) in a
fresh folder, on a free loopback port, with durability off (test data is thrown away), and is
stopped and removed when the process that started it exits. No Docker, no system service.
"""

import atexit
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

UNPRIVILEGED = "nobody"


class ServiceError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _as_user() -> list[str]:
    """A prefix running a command as an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={UNPRIVILEGED}", "--regid=nogroup", "--clear-groups", "--"]


def _owned_folder(prefix: str) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o755)
    if os.geteuid() == 0:
        user = pwd.getpwnam(UNPRIVILEGED)
        os.chown(folder, user.pw_uid, user.pw_gid)
    return folder


def postgres_bin(name: str) -> str:
    """A PostgreSQL server program: Debian keeps them out of PATH, under its version's folder."""
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    on_path = shutil.which(name)
    if on_path:
        return on_path
    raise ServiceError(
        f"PostgreSQL's {name} was not found: install Debian's postgresql package"
        " (.ci/run does) to run the tests on PostgreSQL"
    )


def _run(argv: list[str], **kwargs) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise ServiceError(f"{argv[0]} failed: {result.stderr.strip() or result.stdout.strip()}")


class Postgres:
    """A throwaway PostgreSQL cluster; `url(name)` addresses one of its databases."""

    user = "malamar"

    def __init__(self, *settings: str):
        self.folder = _owned_folder("malamar-pg-")
        self.data = self.folder / "data"
        self.port = free_port()
        self.settings = settings  # more server settings, "name=value"

    def start(self) -> "Postgres":
        _run(
            [
                *_as_user(),
                postgres_bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                self.user,
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ]
        )
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.folder}",
                "-c fsync=off",
                "-c synchronous_commit=off",
                "-c full_page_writes=off",
                "-c max_connections=300",
                "-c shared_buffers=64MB",
                *(f"-c {setting}" for setting in self.settings),
            ]
        )
        _run(
            [
                *_as_user(),
                postgres_bin("pg_ctl"),
                "-D",
                str(self.data),
                "-l",
                str(self.folder / "server.log"),
                "-o",
                options,
                "-w",
                "-t",
                "60",
                "start",
            ]
        )
        atexit.register(self.stop)
        return self

    def url(self, name: str = "postgres") -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.data.exists():
            pg_ctl = postgres_bin("pg_ctl")
            stop = [pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"]
            subprocess.run([*_as_user(), *stop], capture_output=True)
        shutil.rmtree(self.folder, ignore_errors=True)


class Redis:
    """A throwaway Redis server without persistence."""

    def __init__(self):
        self.folder = _owned_folder("malamar-redis-")
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    def start(self) -> "Redis":
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(binary).exists():
            raise ServiceError(
                "redis-server was not found: install Debian's redis-server package"
                " (.ci/run does) to run the tests that need Redis"
            )
        self.process = subprocess.Popen(
            [
                *_as_user(),
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
                "--logfile",
                "",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        atexit.register(self.stop)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServiceError(f"redis-server exited with {self.process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise ServiceError("redis-server did not answer within 30 s")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
