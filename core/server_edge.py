"""What daphne (Twisted's HTTP parser) answers before a request ever reaches Django.

Twisted drops the connection without a word when the request line or one header line is longer
than its line limit (`LineReceiver.MAX_LENGTH`, 16 KB), and answers an empty `400` when the
request line and headers together pass `HTTPChannel.totalHeadersSize`. A browser then shows
"connection reset" for a long link. Here those cases get a proper status with a short body:
`414 URI Too Long` when the address is the culprit (the request line, or most of the bytes),
`431 Request Header Fields Too Large` when the headers are.

`install()` patches Twisted's `HTTPChannel` once per process; `malamar_site.asgi` calls it, so
every way of starting the server (malamar, manage.py runserver, daphne) answers the same.
"""

from twisted.web import http

URI_TOO_LONG = 414
HEADERS_TOO_LARGE = 431
REASONS = {URI_TOO_LONG: b"URI Too Long", HEADERS_TOO_LARGE: b"Request Header Fields Too Large"}
BODIES = {
    URI_TOO_LONG: b"The address is too long: Malamar accepts up to 16 KB.\n",
    HEADERS_TOO_LARGE: b"The request headers are too large: Malamar accepts up to 16 KB.\n",
}
# After answering, the rest of what the client sends is read and dropped (closing a socket with
# unread data resets it, and the client would never see the answer) for at most this long.
DRAIN_SECONDS = 5.0

_installed = False


def _in_request_line(channel: http.HTTPChannel) -> bool:
    return bool(channel._HTTPChannel__first_line)


def refuse_oversized(channel: http.HTTPChannel, status: int) -> None:
    """Answer `status` with a short text body, then close once the client stops sending."""
    from twisted.internet import reactor  # the one daphne installed

    transport = channel.transport
    body = BODIES[status]
    transport.write(
        b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status])
        + b"Content-Type: text/plain; charset=utf-8\r\n"
        + b"Content-Length: %d\r\n" % len(body)
        + b"Connection: close\r\n\r\n"
        + body
    )
    channel.setTimeout(None)
    channel.dataReceived = lambda data: None  # no more parsing: drain
    channel.lineReceived = lambda line: None
    channel._networkProducer.unregisterProducer()
    if hasattr(transport, "loseWriteConnection"):
        transport.loseWriteConnection()  # the answer and a FIN now; the client closes its side
        call = reactor.callLater(DRAIN_SECONDS, transport.abortConnection)
        original_lost = channel.connectionLost

        def connection_lost(reason):
            if call.active():
                call.cancel()
            original_lost(reason)

        channel.connectionLost = connection_lost
    else:
        transport.loseConnection()


def _line_length_exceeded(self, line):
    refuse_oversized(self, URI_TOO_LONG if _in_request_line(self) else HEADERS_TOO_LARGE)


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    line_received = http.HTTPChannel.lineReceived

    def lineReceived(self, line):  # Twisted's name
        if self.persistent and self._receivedHeaderSize + len(line) > self.totalHeadersSize:
            # The address is to blame when it is this line, or took most of the budget.
            long_uri = _in_request_line(self) or (
                len(getattr(self, "_path", b"")) > self.totalHeadersSize // 2
            )
            refuse_oversized(self, URI_TOO_LONG if long_uri else HEADERS_TOO_LARGE)
            return None
        return line_received(self, line)

    http.HTTPChannel.lineReceived = lineReceived
    http.HTTPChannel.lineLengthExceeded = _line_length_exceeded
