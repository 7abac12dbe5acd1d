"""Hostile input to `malamar mcp` (JSON-RPC over stdio), sent raw by a misbehaving client: every
bad message gets a JSON-RPC error with a message and the server keeps serving; no line is read
into memory unbounded; nothing is half-written."""

import json
import queue
import subprocess
import threading

import pytest

from tests import test_mcp_server
from tests.live import django_script

seeded = test_mcp_server.seeded  # the same seeded data dir and workspaces (a fixture)

pytestmark = pytest.mark.live

ANSWER_SECONDS = 60  # a loaded 2-core machine; only a missing answer waits this long
LINE_LIMIT = 64 * 1024  # MALAMAR_MAX_JSON_BYTES for these servers: a small one, quick to pass


class RawClient:
    """`malamar mcp` on a pipe: raw lines in, JSON-RPC answers out (read by a thread)."""

    def __init__(self, params, **env):
        self.process = subprocess.Popen(
            [params.command, *params.args],
            env={**params.env, **env},
            cwd=params.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.stderr = b""
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "hostile", "version": "1"},
            },
            id=0,
        )
        self.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _read(self):
        for line in self.process.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def send(self, data: bytes) -> None:
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def send_json(self, message: dict) -> None:
        self.send(json.dumps(message).encode() + b"\n")

    def answer(self) -> dict:
        line = self.answers.get(timeout=ANSWER_SECONDS)
        assert line is not None, f"the server ended: {self.close()[-2000:]}"
        return json.loads(line)  # every line on stdout is JSON

    def request(self, method: str, params: dict, *, id) -> dict:
        self.send_json({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        return self.answer()

    def call(self, name: str, arguments, *, id=7) -> dict:
        return self.request("tools/call", {"name": name, "arguments": arguments}, id=id)

    def peak_memory_kb(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as status:
            peak = next(line for line in status if line.startswith("VmHWM"))
        return int(peak.split()[1])

    def close(self) -> str:
        if self.process.stdin and not self.process.stdin.closed:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        self.stderr = self.process.stderr.read()
        return self.stderr.decode("utf-8", "replace")


@pytest.fixture(scope="module")
def client(seeded):
    """One server for the module: each test ends by checking it still serves (a start loads
    Django and the SDK, seconds of CPU on a loaded machine)."""
    data_dir, ids = seeded
    params = test_mcp_server.server(data_dir, ids["home"])
    raw = RawClient(params, MALAMAR_MAX_JSON_BYTES=str(LINE_LIMIT))
    yield raw
    stderr = raw.close()
    assert "Traceback" not in stderr, stderr[-3000:]


def still_serving(client: RawClient) -> None:
    answer = client.call("search_tasks", {"query": "login"}, id=99)
    assert answer["id"] == 99 and answer["result"]["isError"] is False


def tasks_where(seeded, **lookup) -> int:
    data_dir, _ids = seeded
    check = f"from tasks.models import Task; print(Task.objects.filter(**{lookup!r}).count())"
    return int(django_script(data_dir, check).stdout.strip())


def error_of(answer: dict) -> str:
    """The message of a JSON-RPC error, or of a tool error (a result with isError)."""
    if "error" in answer:
        assert answer["error"]["message"], answer
        return answer["error"]["message"]
    assert answer["result"]["isError"] is True, answer
    return answer["result"]["content"][0]["text"]


def test_a_line_that_is_not_json_is_a_parse_error_and_the_server_goes_on(client):
    for line in (b"{not json\n", b'{"jsonrpc": "2.0", "id": \n', b"\xff\xfe\x00garbage\n"):
        client.send(line)
        answer = client.answer()
        assert answer["id"] is None and answer["error"]["code"] == -32700, answer
        assert "not valid JSON" in answer["error"]["message"]
    still_serving(client)


def test_a_message_that_is_no_request_is_an_invalid_request(client):
    for message in ([1, 2], "call", {"jsonrpc": "2.0", "id": 3}, {"id": 4, "method": 5}):
        client.send(json.dumps(message).encode() + b"\n")
        answer = client.answer()
        assert answer["error"]["code"] == -32600 and answer["error"]["message"], answer
    still_serving(client)


def test_deep_nesting_is_refused_with_a_message(client):
    deep = "[" * 20_000 + "]" * 20_000  # 40 KB: within the line limit
    line = '{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": '
    line += '"create_task", "arguments": {"summary": ' + deep + "}}}\n"
    client.send(line.encode())
    answer = client.answer()
    assert "nested" in error_of(answer), answer
    still_serving(client)


def test_a_line_over_the_limit_is_refused_unread_and_the_server_goes_on(client):
    """A 100 MB line (a runaway client) is neither kept in memory nor the end of the server."""
    still_serving(client)  # loaded: `initialize` is answered before Django and the SDK load
    before = client.peak_memory_kb()
    chunk = b"x" * (1024 * 1024)
    writer = threading.Thread(
        target=lambda: client.send(b'{"jsonrpc": "2.0", "id": 8, "params": "' + chunk * 100)
    )
    writer.start()
    writer.join(timeout=120)
    client.send(b'"}\n')
    answer = client.answer()
    assert answer["id"] is None and answer["error"]["code"] == -32600, answer
    assert "at most 64 KB" in answer["error"]["message"]
    assert "MALAMAR_MAX_JSON_BYTES" in answer["error"]["message"]
    still_serving(client)
    assert client.peak_memory_kb() - before < 30_000  # KB: far less than the 100 MB line


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("create_task", {"summary": "Fix it \ud800 now"}, "summary"),
        ("create_task", {"summary": "Fix it", "description": "a\x00b"}, "description"),
        ("search_tasks", {"query": "log\x00in"}, "query"),
        ("get_task", {"task_id": "\udfff"}, "task_id"),
        ("related_tasks", {"text": "x\ud800"}, "text"),
    ],
)
def test_unstorable_text_in_any_argument_is_refused_with_its_name(client, tool, arguments, field):
    answer = client.call(tool, arguments)
    message = error_of(answer)
    assert field in message and ("surrogate" in message or "NUL" in message), message
    assert "Traceback" not in json.dumps(answer)
    still_serving(client)


def test_wrong_types_unknown_tools_and_long_names_are_errors_with_a_message(seeded, client):
    cases = [
        ("create_task", {"summary": 5}),
        ("create_task", {"summary": ["a"]}),
        ("create_task", "not an object"),
        ("search_tasks", {"limit": "lots"}),
        ("search_tasks", {"limit": 10**30}),
        ("get_task", {}),
        ("no_such_tool", {}),
        ("create_task", {"summary": "S" * 501}),
        ("comment_on_task", {"task_id": "t" * 100_000, "content": "hi"}),
        ("search_tasks", {"query": "q" * 60_000}),
    ]
    for number, (tool, arguments) in enumerate(cases, start=10):
        answer = client.call(tool, arguments, id=number)
        message = error_of(answer)
        assert "Traceback" not in message and 'File "' not in message, message
    assert "at most 500 characters" in error_of(client.call("create_task", {"summary": "S" * 501}))
    long_query = client.call("search_tasks", {"query": "q" * 60_000})
    assert "query must be at most 1000 characters" in error_of(long_query)
    still_serving(client)
    assert tasks_where(seeded, summary__startswith="SSS") == 0


@pytest.mark.pg
def test_a_refused_write_leaves_nothing_half_written(seeded, client):
    answer = client.call("create_task", {"summary": "Half written?", "description": "x\x00"})
    assert "description" in error_of(answer)
    assert tasks_where(seeded, summary="Half written?") == 0
