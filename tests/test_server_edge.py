"""The server's edge, against a real daphne process: what it answers and logs for requests
anyone who can reach the port may send (refused hosts, overlong URLs)."""

import socket

import pytest
import requests

from tests.live import Server, wait_until
from tests.stack import data_dir_from

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def server(tmp_path_factory, template_db):
    data_dir = data_dir_from(template_db, tmp_path_factory.mktemp("edge"))
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


def _raw_request(server: Server, request: bytes) -> bytes:
    """Send bytes as they are and read the whole answer (until the server closes)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _status_and_body(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.mark.parametrize("length", [16 * 1024 + 10, 40 * 1024, 200 * 1024])
def test_an_overlong_url_is_answered_414_not_dropped(server, length):
    response = requests.get(f"{server.url}/{'a' * length}", timeout=10)
    assert response.status_code == 414
    assert response.reason == "URI Too Long"
    assert "too long" in response.text and len(response.text) < 200
    assert requests.get(f"{server.url}/api/health", timeout=5).ok  # the server is fine


def test_a_url_just_under_the_limit_with_headers_past_the_total_is_414(server):
    # The request line alone fits the line limit; with the headers it passes the total limit.
    raw = _raw_request(
        server,
        b"GET /"
        + b"a" * 16200
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "
        + b"b" * 500
        + b"\r\n\r\n",
    )
    status, body = _status_and_body(raw)
    assert status == 414 and b"address is too long" in body


@pytest.mark.parametrize("header_lines", [[b"c" * 20000], [b"d" * 8000, b"e" * 8000, b"f" * 800]])
def test_overlong_headers_are_answered_431(server, header_lines):
    headers = b"".join(b"X-Big-%d: %s\r\n" % (i, value) for i, value in enumerate(header_lines))
    raw = _raw_request(server, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n" + headers + b"\r\n")
    status, body = _status_and_body(raw)
    assert status == 431 and b"headers are too large" in body
