"""`malamar service install | uninstall | status`: run Malamar in the background.

Linux: a systemd *user* unit (no root needed) that restarts on failure. macOS: a launchd agent.
The unit runs this same `malamar` (the one running `service install`) with the PATH and
MALAMAR_* variables of the shell that installed it, every path made absolute, so the CLIs and the
chosen data directory are found the same way.
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
    kept = {k: v for k, v in env.items() if k.startswith("MALAMAR_")}
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


def systemd_unit(command: list[str], env: dict[str, str]) -> str:
    lines = [
        "[Unit]",
        "Description=Malamar: your AI coding CLIs as an autonomous team",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"ExecStart={shlex.join(command)}",
        "Restart=on-failure",
        "RestartSec=5",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=10",
    ]
    lines += [f'Environment="{k}={v}"' for k, v in env.items()]
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
        path.write_text(launchd_plist(command, env, log_dir))
        print(f"Wrote {path}")
        return _run("launchctl", "load", "-w", str(path))
    path = unit_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(systemd_unit(command, env))
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
