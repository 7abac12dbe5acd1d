"""`malamar service install | uninstall | status`: run Malamar in the background.

Linux: a systemd *user* unit (no root needed) that restarts on failure. macOS: a launchd agent.
The unit runs this same `malamar` (the one running `service install`) with the PATH, the
MALAMAR_* variables and DATABASE_URL / REDIS_URL of the shell that installed it, every path made
absolute, so the CLIs, the chosen data directory and a PostgreSQL/Redis setup are found the same
way. The secret ones (DATABASE_URL and REDIS_URL hold passwords, MALAMAR_SECRET_KEY) never go
into the unit, which other users of the machine may read: systemd reads them from an environment
file only its owner can read; launchd's agent, which has no such file, is itself made private.
"""

import os
import platform
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from xml.sax.saxutils import escape

from core.config import OPTIONS, OPTIONS_BY_NAME

UNIT_NAME = "malamar.service"
LAUNCHD_LABEL = "dev.malamar"


# Variables that hold a path: the service starts in another directory, so they are made absolute.
PATH_VARIABLES = tuple(option.env for option in OPTIONS if option.kind == "path")
# Every option's variable is the service's too (DATABASE_URL and REDIS_URL have no MALAMAR_).
OPTION_VARIABLES = frozenset(option.env for option in OPTIONS)
SECRET_VARIABLES = frozenset(option.env for option in OPTIONS if option.secret)
PRIVATE = 0o600


def malamar_command(argv0: str | None = None) -> list[str]:
    """The `malamar` being run now (not the first one on PATH, which may be another install)."""
    running = Path(argv0 if argv0 is not None else sys.argv[0])
    if running.name == "malamar" and running.is_file():
        return [str(running.resolve())]
    beside_python = Path(sys.executable).parent / "malamar"  # this venv's script
    if beside_python.is_file():
        return [str(beside_python.resolve())]
    return [str(Path(sys.executable).absolute()), "-m", "malamar_site.cli"]


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def service_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if env is None else env)
    kept = {
        k: v for k, v in env.items() if k.startswith("MALAMAR_") or (k in OPTION_VARIABLES and v)
    }
    for name in PATH_VARIABLES:
        if kept.get(name, "").strip():
            kept[name] = _absolute(kept[name].strip())
    path = env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    # An empty or relative PATH entry would mean the service's own working directory.
    kept["PATH"] = os.pathsep.join(
        dict.fromkeys(os.path.abspath(os.path.expanduser(e or ".")) for e in path.split(os.pathsep))
    )
    if "HOME" in env:
        kept["HOME"] = _absolute(env["HOME"])
    return dict(sorted(kept.items()))


def secrets_of(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the variables that may be shown, the secret ones)."""
    public = {k: v for k, v in env.items() if k not in SECRET_VARIABLES}
    return public, {k: v for k, v in env.items() if k in SECRET_VARIABLES}


def environment_file(env: dict[str, str]) -> str:
    """systemd's EnvironmentFile= format: in double quotes every character is kept (a backslash
    before the shell's special ones); no `%` specifiers are expanded there, unlike in
    Environment=, which a percent-encoded password in a URL would meet."""
    lines = []
    for key, value in env.items():
        quoted = "".join(f"\\{c}" if c in '\\"`$' else c for c in value)
        lines.append(f'{key}="{quoted}"')
    return "\n".join(lines) + "\n"


def _no_specifiers(text: str) -> str:
    """systemd expands `%x` specifiers in the unit's values: `%%` is a literal `%`."""
    return text.replace("%", "%%")


def _unit_quoted(text: str) -> str:
    """A value inside Environment="…": C-style escapes for `\\` and `"`, no specifiers."""
    return _no_specifiers(text.replace("\\", "\\\\").replace('"', '\\"'))


def systemd_unit(command: list[str], env: dict[str, str], secrets_file: Path | None = None) -> str:
    lines = [
        "[Unit]",
        "Description=Malamar: your AI coding CLIs as an autonomous team",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={_no_specifiers(shlex.join(command))}",
        "Restart=on-failure",
        "RestartSec=5",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=10",
    ]
    lines += [f'Environment="{_unit_quoted(f"{k}={v}")}"' for k, v in env.items()]
    if secrets_file is not None:
        lines.append(f"EnvironmentFile={secrets_file}")
    lines += ["", "[Install]", "WantedBy=default.target", ""]
    return "\n".join(lines)


def launchd_plist(command: list[str], env: dict[str, str], log_dir: Path) -> str:
    args = "".join(f"\n      <string>{escape(part)}</string>" for part in command)
    variables = "".join(
        f"\n      <key>{escape(k)}</key>\n      <string>{escape(v)}</string>"
        for k, v in env.items()
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
  <dict>
    <key>Label</key>
    <string>{LAUNCHD_LABEL}</string>
    <key>ProgramArguments</key>
    <array>{args}
    </array>
    <key>EnvironmentVariables</key>
    <dict>{variables}
    </dict>
    <key>RunAtLoad</key>
    <true/>
    <key>KeepAlive</key>
    <dict>
      <key>SuccessfulExit</key>
      <false/>
    </dict>
    <key>StandardOutPath</key>
    <string>{escape(str(log_dir / "malamar.log"))}</string>
    <key>StandardErrorPath</key>
    <string>{escape(str(log_dir / "malamar.log"))}</string>
  </dict>
</plist>
"""


def unit_path(home: Path) -> Path:
    return home / ".config" / "systemd" / "user" / UNIT_NAME


def plist_path(home: Path) -> Path:
    return home / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


def secrets_path(home: Path) -> Path:
    return home / ".config" / "malamar" / "service.env"


def write_private(path: Path, text: str) -> None:
    """Readable by its owner only, from its first byte (never briefly world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.unlink(missing_ok=True)  # a file from before keeps its mode through O_CREAT
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE)
    with os.fdopen(fd, "w") as file:
        file.write(text)


def _run(*argv: str) -> int:
    if not shutil.which(argv[0]):
        print(f"({argv[0]} not found: run `{shlex.join(argv)}` yourself)")
        return 0
    return subprocess.run(argv, check=False).returncode


def install(*, home: Path | None = None, system: str | None = None) -> int:
    home = home or Path.home()
    system = system or platform.system()
    command, env = malamar_command(), service_environment()
    if system == "Darwin":
        data_dir = OPTIONS_BY_NAME["data_dir"]
        log_dir = Path(env.get(data_dir.env) or home / ".malamar").expanduser() / "logs"
        log_dir.mkdir(parents=True, exist_ok=True)
        path = plist_path(home)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, launchd_plist(command, env, log_dir))  # it may hold secrets
        print(f"Wrote {path}")
        return _run("launchctl", "load", "-w", str(path))
    public, secrets = secrets_of(env)
    secrets_file = secrets_path(home)
    secrets_file.unlink(missing_ok=True)
    if secrets:
        write_private(secrets_file, environment_file(secrets))
        print(f"Wrote {secrets_file} (readable by you only: {', '.join(secrets)})")
    path = unit_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(systemd_unit(command, public, secrets_file if secrets else None))
    print(f"Wrote {path}")
    code = _run("systemctl", "--user", "daemon-reload") or _run(
        "systemctl", "--user", "enable", "--now", UNIT_NAME
    )
    print("Logs: journalctl --user -u malamar -f")
    print("To keep it running while you are logged out: loginctl enable-linger $USER")
    return code


def uninstall(*, home: Path | None = None, system: str | None = None) -> int:
    home = home or Path.home()
    if (system or platform.system()) == "Darwin":
        path = plist_path(home)
        if path.exists():
            _run("launchctl", "unload", "-w", str(path))
            path.unlink()
        print("Malamar's launchd agent is removed.")
        return 0
    path = unit_path(home)
    if path.exists():
        _run("systemctl", "--user", "disable", "--now", UNIT_NAME)
        path.unlink()
        _run("systemctl", "--user", "daemon-reload")
    secrets_path(home).unlink(missing_ok=True)
    print("Malamar's service is removed.")
    return 0


def status(*, home: Path | None = None, system: str | None = None) -> int:
    home = home or Path.home()
    darwin = (system or platform.system()) == "Darwin"
    path = plist_path(home) if darwin else unit_path(home)
    if not path.exists():
        print("Malamar is not installed as a service (malamar service install).")
        return 3
    print(f"Installed: {path}")
    if darwin:
        return _run("launchctl", "list", LAUNCHD_LABEL)
    return _run("systemctl", "--user", "status", "--no-pager", UNIT_NAME)


ACTIONS = {"install": install, "uninstall": uninstall, "status": status}
