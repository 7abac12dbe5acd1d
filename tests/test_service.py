"""`malamar service`: the systemd user unit and the launchd agent, checked by content."""

import plistlib

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
