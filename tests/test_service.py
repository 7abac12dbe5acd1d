"""`malamar service`: the systemd user unit and the launchd agent, checked by content."""

import plistlib
import shlex
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
