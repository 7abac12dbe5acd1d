"""`malamar mcp` answers `initialize` before it loads Django and the MCP SDK.

Loading both costs 2-3 CPU-seconds (8-20 s on a busy machine), and an agent CLI waits for the
`initialize` answer before its first request (Claude Code with MCP_CONNECTION_NONBLOCKING=false,
Codex with the server `required`). So the first line on stdin is read here, with the standard
library only: a well-formed `initialize` gets the answer the SDK would give (same protocol
version choice, capabilities, server info and instructions; tests/test_mcp_server.py compares
them), and everything, that line included, is then handed to the SDK, whose own answer to the
replayed `initialize` is not sent again (tasks.mcp_stdio.Writer). Anything else is only handed
on: the SDK and tasks.mcp_stdio answer it as before.
"""

import json
import os
import sys
from dataclasses import dataclass
from typing import BinaryIO

SERVER_NAME = "malamar"
INSTRUCTIONS = (
    "Malamar's task board for one workspace: look up its tasks (search, read one with its "
    "comments, find related ones) before duplicating work, create follow-up tasks, comment on "
    "tasks, and review tasks In Review when asked to."
)
# The SDK's HANDSHAKE_PROTOCOL_VERSIONS (mcp_types.version, mcp 2.3.0): a requested version it
# knows is answered as is, any other with the newest (the last).
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
# What the SDK's MCPServer declares (its tools, resources and prompts managers).
CAPABILITIES = {
    "prompts": {"listChanged": False},
    "resources": {"listChanged": False, "subscribe": False},
    "tools": {"listChanged": False},
}


@dataclass
class Handshake:
    """The protocol's wire, claimed from stdin/stdout, and what was read from it already."""

    wire_in: BinaryIO
    wire_out: BinaryIO
    read: bytes = b""  # handed to the SDK before the rest of the wire
    answered: str | int | None = None  # the id of the `initialize` answered here


taken: Handshake | None = None  # this process's handshake, once `answer_initialize` ran


def claim_stdio() -> tuple[BinaryIO, BinaryIO]:
    """The wire as private descriptors; fd 0 becomes the null device and fd 1 stderr, so
    nothing else in the process (a print, a child, a logger) can read or corrupt the protocol."""
    wire_in = os.fdopen(os.dup(0), "rb")
    wire_out = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return wire_in, wire_out


def answer_initialize(limit: int) -> Handshake:
    """Claim the wire, read its first message (at most `limit` bytes) and answer it when it is a
    well-formed `initialize`. Never raises on what the client sent."""
    global taken
    wire_in, wire_out = claim_stdio()
    read = b"\n"
    while read and not read.strip():  # blank lines before the first message
        read = wire_in.readline(limit + 1)
    taken = Handshake(wire_in, wire_out, read=read)
    request = _initialize_request(read)
    if request is not None:
        answer = json.dumps(initialize_answer(request), separators=(",", ":"))
        wire_out.write(f"{answer}\n".encode())
        wire_out.flush()
        taken.answered = request["id"]
    return taken


def _initialize_request(line: bytes) -> dict | None:
    """`line` as an `initialize` request the SDK accepts as well, else None."""
    if not line.endswith(b"\n"):
        return None  # empty (the client closed), or longer than the limit
    try:
        message = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None
    request_id, params = message.get("id"), message.get("params")
    valid_id = isinstance(request_id, str) or (
        isinstance(request_id, int) and not isinstance(request_id, bool)
    )
    if message.get("jsonrpc") != "2.0" or not valid_id or not isinstance(params, dict):
        return None
    client = params.get("clientInfo")
    if not (
        isinstance(params.get("protocolVersion"), str)
        and isinstance(params.get("capabilities"), dict)
        and isinstance(client, dict)
        and isinstance(client.get("name"), str)
        and isinstance(client.get("version"), str)
    ):
        return None
    return message


def initialize_answer(request: dict) -> dict:
    requested = request["params"]["protocolVersion"]
    version = requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
    result = {
        "capabilities": CAPABILITIES,
        "instructions": INSTRUCTIONS,
        "protocolVersion": version,
        "serverInfo": {"name": SERVER_NAME, "version": ""},
    }
    return {"jsonrpc": "2.0", "id": request["id"], "result": result}


class Replay:
    """A wire whose first bytes were read already: `readline` hands them out first."""

    def __init__(self, wire: BinaryIO, read: bytes):
        self.wire, self.pending = wire, read

    def readline(self, size: int = -1) -> bytes:
        if not self.pending:
            return self.wire.readline(size)
        cut = len(self.pending) if size < 0 else min(size, len(self.pending))
        newline = self.pending.find(b"\n", 0, cut)
        cut = newline + 1 if newline != -1 else cut
        line, self.pending = self.pending[:cut], self.pending[cut:]
        if line.endswith(b"\n") or (size >= 0 and len(line) >= size) or self.pending:
            return line
        return line + self.wire.readline(-1 if size < 0 else size - len(line))
