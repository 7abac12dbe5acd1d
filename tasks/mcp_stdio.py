"""The stdio transport of `malamar mcp`: JSON-RPC lines in, answers out, hostile input refused.

The SDK's own stdio transport reads a whole line however long it is and drops a line it cannot
parse without answering. Here every line is read with a limit (MALAMAR_MAX_JSON_BYTES, as for
the API's bodies; a longer line is skipped unread, chunk by chunk) and checked before the SDK
sees it; a line that is not valid JSON, not a JSON-RPC message, or carries text the database
cannot store (a lone surrogate, NUL) gets a JSON-RPC error with a message, and the server goes
on with the next line.
"""

import json
import logging
import threading
from dataclasses import dataclass

import anyio
import mcp_types as types
from django.conf import settings
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from core.json_input import BodyRefused, check_text
from core.limits import human_size
from tasks import mcp_handshake

log = logging.getLogger(__name__)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


@dataclass
class Refusal:
    code: int
    message: str
    id: str | int | None = None

    def line(self) -> str:
        error = {"code": self.code, "message": self.message}
        return json.dumps({"jsonrpc": "2.0", "id": self.id, "error": error}) + "\n"


def _request_id(data) -> str | int | None:
    """The id of a (broken) message, when it has one a JSON-RPC error may repeat."""
    if isinstance(data, dict) and "method" in data:
        value = data.get("id")
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return value
    return None


def _first_problem(error: ValidationError) -> str:
    detail = error.errors()[0] if error.errors() else {}
    where = ".".join(str(part) for part in detail.get("loc", ())[1:])  # [0]: the union member
    text = detail.get("msg", "not a JSON-RPC message")
    return f"{where}: {text}" if where else text


def check_line(line: bytes) -> str | Refusal:
    """The line as text for the SDK, or why it is refused."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Refusal(PARSE_ERROR, f"The message is not valid JSON: not UTF-8 (byte {exc.start})")
    try:
        data = json.loads(text)
    except RecursionError:
        return Refusal(PARSE_ERROR, "The message is not valid JSON: it is nested too deeply")
    except ValueError as exc:
        return Refusal(PARSE_ERROR, f"The message is not valid JSON: {exc}")
    if not isinstance(data, dict):
        return Refusal(INVALID_REQUEST, "A message must be one JSON-RPC object (no batches)")
    try:
        types.jsonrpc_message_adapter.validate_python(data, by_name=False)
    except ValidationError as exc:
        message = f"Not a JSON-RPC message: {_first_problem(exc)}"
        return Refusal(INVALID_REQUEST, message, _request_id(data))
    except RecursionError:
        return Refusal(PARSE_ERROR, "The message is not valid JSON: it is nested too deeply")
    try:
        check_text(data)
    except BodyRefused as exc:
        return Refusal(INVALID_PARAMS, str(exc), _request_id(data))
    return text


class Lines:
    """The lines of the wire (binary), each at most `limit` bytes; a longer one is read to its
    end in pieces of `limit` and refused, so memory stays bounded whatever the client sends."""

    def __init__(self, wire, limit: int, refuse):
        self.wire, self.limit, self.refuse = wire, limit, refuse

    def __aiter__(self):
        return self

    async def __anext__(self) -> str:
        while True:
            line = await anyio.to_thread.run_sync(self._read_line)
            if line is None:
                raise StopAsyncIteration
            checked = check_line(line) if isinstance(line, bytes) else line
            if isinstance(checked, str):
                return checked
            if checked.id is not None or checked.code != INVALID_PARAMS:
                await self.refuse(checked)
            else:  # a notification (no id) is never answered
                log.warning("Refused an MCP notification: %s", checked.message)

    def _read_line(self) -> bytes | Refusal | None:
        line = b"\n"
        while not line.strip():  # blank lines between messages are skipped
            line = self.wire.readline(self.limit + 1)
            if not line:
                return None
        if line.endswith(b"\n") or len(line) <= self.limit:
            return line.rstrip(b"\r\n")
        while not line.endswith(b"\n"):  # too long: skip the rest unread
            line = self.wire.readline(self.limit)
            if not line:
                break
        return Refusal(
            INVALID_REQUEST,
            f"The message is too large: at most {human_size(self.limit)} per message "
            "(MALAMAR_MAX_JSON_BYTES); it was not read",
        )


class Writer:
    """The wire's write side for the SDK's answers and ours: one whole line at a time.
    `answered`: the id of the `initialize` answered before the SDK loaded; its own answer to
    that request (replayed to it) is not sent a second time."""

    def __init__(self, wire, *, answered: str | int | None = None):
        self.wire, self.lock = wire, threading.Lock()
        self.answered = answered

    def _write(self, text: str) -> None:
        with self.lock:
            if self.answered is not None and self._answers_initialize(text):
                self.answered = None
                return
            self.wire.write(text.encode("utf-8"))
            self.wire.flush()

    def _answers_initialize(self, text: str) -> bool:
        try:
            message = json.loads(text)
        except ValueError:
            return False
        return (
            isinstance(message, dict)
            and "method" not in message
            and message.get("id") == self.answered
        )

    async def write(self, text: str) -> None:
        await anyio.to_thread.run_sync(self._write, text)

    async def flush(self) -> None:
        pass  # every write is flushed

    async def refuse(self, refusal: Refusal) -> None:
        await self.write(refusal.line())


async def serve_stdio(lowlevel_server) -> None:
    """Serve over the wire: the one `answer_initialize` claimed already when `malamar mcp`
    answered `initialize` before loading (tasks.mcp_handshake), else stdin/stdout now."""
    handshake = mcp_handshake.taken
    if handshake is None:
        wire_in, wire_out = mcp_handshake.claim_stdio()
        handshake = mcp_handshake.Handshake(wire_in, wire_out)
    writer = Writer(handshake.wire_out, answered=handshake.answered)
    wire = mcp_handshake.Replay(handshake.wire_in, handshake.read)
    lines = Lines(wire, settings.CONFIG.max_json_bytes, writer.refuse)
    async with stdio_server(stdin=lines, stdout=writer) as (read_stream, write_stream):
        options = lowlevel_server.create_initialization_options()
        await lowlevel_server.run(read_stream, write_stream, options)
