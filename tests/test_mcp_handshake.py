"""`malamar mcp`'s early `initialize` answer (tasks/mcp_handshake.py) in one process: it speaks
for the SDK, so it must agree with it, and it must hand every byte it read on to the SDK."""

import io
import json

import mcp_types.version
import pytest

from tasks import mcp_handshake
from tasks.mcp_handshake import PROTOCOL_VERSIONS, Replay, _initialize_request
from tasks.mcp_server import build_server
from tasks.mcp_stdio import Writer


def line(message) -> bytes:
    return (json.dumps(message) + "\n").encode()


def initialize(**changes) -> dict:
    params = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}
    params["clientInfo"] = {"name": "claude-code", "version": "2.1.197"}
    message = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    return {**message, **changes}


def test_it_negotiates_as_the_sdk_does():
    assert PROTOCOL_VERSIONS == mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS


def test_it_declares_what_the_sdk_server_declares():
    options = build_server("W1")._lowlevel_server.create_initialization_options()
    declared = options.capabilities.model_dump(by_alias=True, exclude_none=True)
    declared = {key: value for key, value in declared.items() if value != {}}
    assert declared == mcp_handshake.CAPABILITIES
    assert (options.server_name, options.instructions) == (
        mcp_handshake.SERVER_NAME,
        mcp_handshake.INSTRUCTIONS,
    )


@pytest.mark.parametrize(
    "message",
    [
        initialize(id=True),
        initialize(id=None),
        initialize(jsonrpc="1.0"),
        initialize(method="tools/list"),
        initialize(params={"protocolVersion": 5, "capabilities": {}, "clientInfo": {}}),
        initialize(params={"protocolVersion": "2025-06-18"}),
        [initialize()],
    ],
    ids=["bool id", "no id", "jsonrpc", "method", "version", "no client", "batch"],
)
def test_anything_but_a_wellformed_initialize_is_left_to_the_sdk(message):
    assert _initialize_request(line(message)) is None


def test_a_line_cut_at_the_limit_or_not_json_is_left_to_the_sdk():
    assert _initialize_request(line(initialize())[:-1]) is None
    assert _initialize_request(b"{not json\n") is None
    assert _initialize_request(b"[" * 100_000 + b"\n") is None
    assert _initialize_request(line(initialize())) is not None


def test_what_was_read_is_replayed_before_the_rest_of_the_wire():
    wire = Replay(io.BytesIO(b"second\nthird"), b"first\nsecond-half")
    assert wire.readline(100) == b"first\n"
    assert wire.readline(100) == b"second-halfsecond\n"
    assert wire.readline(3) == b"thi"
    assert wire.readline(100) == b"rd"
    assert wire.readline(100) == b""
    cut = Replay(io.BytesIO(b"rest\n"), b"abcdef")
    assert cut.readline(4) == b"abcd"  # a long line comes in pieces of the limit, as before
    assert cut.readline(10) == b"efrest\n"


def test_the_sdks_own_answer_to_the_replayed_initialize_is_not_sent_again():
    wire = io.BytesIO()
    writer = Writer(wire, answered="a")
    writer._write('{"jsonrpc":"2.0","method":"notifications/message","params":{}}\n')
    writer._write('{"jsonrpc":"2.0","id":"a","result":{"protocolVersion":"2025-06-18"}}\n')
    writer._write('{"jsonrpc":"2.0","id":"a","result":{"later":true}}\n')
    sent = [json.loads(text) for text in wire.getvalue().decode().splitlines()]
    assert [message.get("id") for message in sent] == [None, "a"]
    assert sent[1]["result"] == {"later": True}
