"""The server's edge, against a real daphne process: what it answers and logs for requests
anyone who can reach the port may send (refused hosts, overlong URLs)."""

import pytest
import requests

from tests.live import Server, blank_database, manage, wait_until

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("edge")
    blank_database(data_dir)
    assert manage(data_dir, "migrate", "--no-input").returncode == 0
    running = Server(data_dir, log=data_dir / "server.log").start()
    yield running
    running.stop()


def _log_lines(server: Server) -> list[str]:
    return server.log.read_text(errors="replace").splitlines()


def test_a_refused_host_is_one_warning_line_not_a_traceback(server):
    start = len(_log_lines(server))
    for _ in range(3):
        response = requests.get(f"{server.url}/", headers={"Host": "evil.example"}, timeout=5)
        assert response.status_code == 400

    def host_lines():
        found = [line for line in _log_lines(server)[start:] if "HTTP_HOST" in line]
        return found if len(found) >= 3 else None

    lines = wait_until(host_lines, timeout=10, what="three log lines about the refused host")
    assert len(lines) == 3
    for line in lines:
        assert "[WARN]" in line and "evil.example" in line, line
    logged = "\n".join(_log_lines(server)[start:])
    assert "Traceback" not in logged and "[ERROR]" not in logged


def test_a_long_unknown_path_is_logged_cut_short(server):
    start = len(_log_lines(server))
    path = "/nothing-here-" + "x" * 8000
    assert requests.get(f"{server.url}{path}", timeout=5).status_code == 404

    def not_found_line():
        found = [line for line in _log_lines(server)[start:] if "Not Found" in line]
        return found[0] if found else None

    line = wait_until(not_found_line, timeout=10, what="the 404 log line")
    assert "[WARN]" in line and "nothing-here-xxx" in line
    assert len(line) < 1000
