"""`malamar service`: the systemd user unit and the launchd agent, checked by content."""

import plistlib
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from malamar_site import service


@pytest.fixture
def calls(monkeypatch):
    recorded = []
    monkeypatch.setattr(service, "_run", lambda *argv: recorded.append(argv) or 0)
    monkeypatch.setenv("MALAMAR_DATA_DIR", "/srv/malamar data")
    monkeypatch.setenv("MALAMAR_PORT", "4000")
    monkeypatch.setenv("PATH", "/home/me/.local/bin:/usr/bin")
    monkeypatch.setenv("SECRET_THING", "not copied")
    return recorded


def test_systemd_unit_install_status_uninstall(tmp_path, calls):
    assert service.install(home=tmp_path, system="Linux") == 0
    unit = (tmp_path / ".config/systemd/user/malamar.service").read_text()
    assert "ExecStart=" in unit and "malamar" in unit.split("ExecStart=")[1].splitlines()[0]
    assert "Restart=on-failure" in unit
    assert 'Environment="MALAMAR_DATA_DIR=/srv/malamar data"' in unit
    assert 'Environment="MALAMAR_PORT=4000"' in unit
    assert 'Environment="PATH=/home/me/.local/bin:/usr/bin"' in unit
    assert "SECRET_THING" not in unit
    assert "WantedBy=default.target" in unit
    assert ("systemctl", "--user", "enable", "--now", "malamar.service") in calls
    assert service.status(home=tmp_path, system="Linux") == 0
    assert service.uninstall(home=tmp_path, system="Linux") == 0
    assert not (tmp_path / ".config/systemd/user/malamar.service").exists()
    assert service.status(home=tmp_path, system="Linux") == 3


def test_launchd_agent(tmp_path, calls):
    assert service.install(home=tmp_path, system="Darwin") == 0
    plist = plistlib.loads((tmp_path / "Library/LaunchAgents/dev.malamar.plist").read_bytes())
    assert plist["Label"] == "dev.malamar"
    assert "malamar" in " ".join(plist["ProgramArguments"])
    assert plist["EnvironmentVariables"]["MALAMAR_PORT"] == "4000"
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardOutPath"].endswith("logs/malamar.log")
    assert calls[-1][:3] == ("launchctl", "load", "-w")


def test_relative_paths_become_absolute_in_the_unit(tmp_path, calls, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("MALAMAR_DATA_DIR", "rel")  # what `--data-dir rel` puts in the env
    monkeypatch.setenv("MALAMAR_TEMP_DIR", "~/scratch")
    monkeypatch.setenv("PATH", "bin::/usr/bin")
    home = tmp_path / "home"
    assert service.install(home=home, system="Linux") == 0
    unit = (home / ".config/systemd/user/malamar.service").read_text()
    env = dict(
        line.removeprefix('Environment="').removesuffix('"').split("=", 1)
        for line in unit.splitlines()
        if line.startswith("Environment=")
    )
    assert env["MALAMAR_DATA_DIR"] == str(work / "rel")
    assert env["MALAMAR_TEMP_DIR"] == str(Path("~/scratch").expanduser().resolve())
    assert env["PATH"].split(":") == [str(work / "bin"), str(work), "/usr/bin"]
    assert service.install(home=home, system="Darwin") == 0
    plist = plistlib.loads((home / "Library/LaunchAgents/dev.malamar.plist").read_bytes())
    assert plist["EnvironmentVariables"]["MALAMAR_DATA_DIR"] == str(work / "rel")
    assert plist["StandardOutPath"] == str(work / "rel" / "logs" / "malamar.log")


def test_the_unit_runs_the_malamar_being_run_not_the_first_on_path(tmp_path, calls, monkeypatch):
    other = tmp_path / "other-install" / "bin"
    running = tmp_path / "this-venv" / "bin"
    for folder in (other, running):
        folder.mkdir(parents=True)
        (folder / "malamar").write_text("#!/bin/sh\n")
        (folder / "malamar").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}:/usr/bin")
    monkeypatch.chdir(running.parent)
    monkeypatch.setattr(sys, "argv", ["bin/malamar", "service", "install"])
    assert service.install(home=tmp_path, system="Linux") == 0
    unit = (tmp_path / ".config/systemd/user/malamar.service").read_text()
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert shlex.split(exec_start.removeprefix("ExecStart=")) == [str(running / "malamar")]


def test_run_as_a_module_the_unit_runs_this_venvs_script(tmp_path, monkeypatch):
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "malamar").write_text("#!/bin/sh\n")
    monkeypatch.setattr(sys, "executable", str(venv_bin / "python"))
    assert service.malamar_command("/src/malamar_site/cli.py") == [str(venv_bin / "malamar")]
    (venv_bin / "malamar").unlink()
    assert service.malamar_command("/src/malamar_site/cli.py") == [
        str(venv_bin / "python"),
        "-m",
        "malamar_site.cli",
    ]


SECRETS = {
    "DATABASE_URL": 'postgres://malamar:p%40ss$w`d\\"x@db.lan:5432/malamar',
    "REDIS_URL": "redis://:r3dis-secret@cache.lan:6379/0",
    "MALAMAR_SECRET_KEY": "signing-s3cret",
}


def test_a_postgresql_and_redis_setup_reaches_the_service_without_secrets_in_the_unit(
    tmp_path, calls, monkeypatch
):
    """DATABASE_URL and REDIS_URL (no MALAMAR_ prefix) were dropped: the service started on
    SQLite. They hold passwords: the unit (readable by others) only names a file that only its
    owner can read, whose values reach the process unchanged (`%`, `$`, quotes included)."""
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MALAMAR_WORKER_CAPACITY", "3")
    assert service.install(home=tmp_path, system="Linux") == 0
    unit = (tmp_path / ".config/systemd/user/malamar.service").read_text()
    assert not [secret for secret in ("p%40ss", "r3dis-secret", "signing-s3cret") if secret in unit]
    assert 'Environment="MALAMAR_WORKER_CAPACITY=3"' in unit
    env_file = Path(next(line for line in unit.splitlines() if "EnvironmentFile=" in line)[16:])
    assert env_file == tmp_path / ".config/malamar/service.env"
    assert env_file.stat().st_mode & 0o777 == 0o600
    assert env_file.parent.stat().st_mode & 0o077 == 0
    # systemd reads double-quoted values as the shell does: bash is the independent reader
    shown = "; ".join(f'printf "%s\\n" "${key}"' for key in SECRETS)
    read = subprocess.run(
        ["bash", "-c", f"set -a; . {shlex.quote(str(env_file))}; {shown}"],
        env={},
        capture_output=True,
        text=True,
        check=True,
    )
    assert read.stdout.splitlines() == list(SECRETS.values())
    assert service.uninstall(home=tmp_path, system="Linux") == 0
    assert not env_file.exists()


def test_the_launchd_agent_holding_secrets_is_private(tmp_path, calls, monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    assert service.install(home=tmp_path, system="Darwin") == 0
    path = tmp_path / "Library/LaunchAgents/dev.malamar.plist"
    assert (
        plistlib.loads(path.read_bytes())["EnvironmentVariables"]["DATABASE_URL"]
        == (SECRETS["DATABASE_URL"])
    )
    assert path.stat().st_mode & 0o777 == 0o600


def test_percent_signs_and_quotes_in_the_unit_stay_literal(tmp_path, calls, monkeypatch):
    """systemd expands `%h`-style specifiers in Environment= and ExecStart=."""
    monkeypatch.setenv("MALAMAR_ALLOWED_HOSTS", 'a%hb"c')
    assert service.install(home=tmp_path, system="Linux") == 0
    unit = (tmp_path / ".config/systemd/user/malamar.service").read_text()
    assert 'Environment="MALAMAR_ALLOWED_HOSTS=a%%hb\\"c"' in unit
