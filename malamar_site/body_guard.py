"""Refuse a request body before the server reads it: too large (413) or not signed in (401).

Daphne is built on Twisted, which receives a request's whole body (into memory, or a temp
file past 100 KB) before daphne hands the request to the ASGI application: an ASGI middleware
only ever sees bodies that were already read, and a client declaring a 1 GB Content-Length is
read for as long as it sends. So the guard sits on daphne's request class, at the moment
Twisted has parsed the headers (`gotLength`) and before it reads the first byte of the body:

- a declared Content-Length over the limit (core.limits) is answered 413 at once and the
  connection closed; a body without a declared length (chunked) is cut off the same way as
  soon as it grows past the limit;
- when a password is set, a request with a body and without a valid session or API token gets
  its 401 (API) or sign-in redirect (pages) as soon as the credentials are checked, without
  waiting for the body; the request never reaches Django before that check has passed.

Django's own checks (core.middleware) give the same answers for requests that get that far.
"""

import logging
from http.cookies import CookieError, SimpleCookie
from urllib.parse import unquote, urlsplit

from daphne import http_protocol
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpResponse, HttpResponseRedirect
from twisted.internet import threads

from core import limits
from core.auth import bearer_valid, password_is_set, session_signed_in
from core.http import error_response, is_api_path
from core.middleware import OPEN_PREFIXES, SIGN_IN_MESSAGE, login_url
from core.views import htmx_error, plain_error_page

log = logging.getLogger(__name__)

REASONS = {
    302: "Found",
    401: "Unauthorized",
    413: "Content Too Large",
    500: "Internal Server Error",
}


def _header(request, name: bytes) -> str:
    values = request.requestHeaders.getRawHeaders(name)
    return values[0].decode("latin-1") if values else ""


def _path(raw_uri: bytes) -> str:
    return unquote(urlsplit(raw_uri.decode("latin-1")).path)


def _auth_refusal(path: str, raw_uri: str, cookie: str, authorization: str):
    """(status, message) when this request needs credentials it does not have, else None.

    Runs in a thread of the reactor's pool: it reads the database."""
    close_old_connections()
    try:
        if path.startswith(OPEN_PREFIXES) or not password_is_set():
            return None
        try:
            morsel = SimpleCookie(cookie).get(settings.SESSION_COOKIE_NAME)
        except CookieError:
            morsel = None
        if session_signed_in(morsel.value if morsel else None) or bearer_valid(authorization):
            return None
        if is_api_path(path):
            return 401, SIGN_IN_MESSAGE
        return 302, login_url(raw_uri)
    finally:
        close_old_connections()


class GuardedWebRequest(http_protocol.WebRequest):
    refused = False
    body_limit = 0
    received = 0
    auth_check = None  # a Deferred while the credentials are being checked
    raw_uri = b"/"

    # --- Twisted callbacks -------------------------------------------------------------

    def gotLength(self, length):
        super().gotLength(length)
        # The request line, kept now: the channel forgets it once the body is complete.
        self.raw_uri = getattr(self.channel, "_path", None) or b"/"
        content_type = _header(self, b"content-type")
        self.body_limit = limits.body_limit(content_type)
        if length is not None and length > self.body_limit:
            self._refuse(413, limits.too_large_message(content_type))
            return
        has_body = bool(length) or (length is None and self._chunked())
        if has_body:
            self._check_credentials()

    def handleContentChunk(self, data):
        if self.refused:
            return  # never stored: the connection is closing
        self.received += len(data)
        if self.received > self.body_limit:
            self._refuse(413, limits.too_large_message(_header(self, b"content-type")))
            return
        super().handleContentChunk(data)

    def process(self):
        if self.refused:
            return None
        if self.auth_check is not None:  # the body arrived before the credentials were checked
            check, self.auth_check = self.auth_check, None
            return check.addCallback(lambda _: self._process_checked())
        return super().process()

    def _process_checked(self):
        return None if self.refused else super().process()

    # --- helpers -----------------------------------------------------------------------

    def _chunked(self) -> bool:
        return "chunked" in _header(self, b"transfer-encoding").lower()

    def _check_credentials(self) -> None:
        raw_uri = self.raw_uri
        # A client that waits for "100 Continue" before sending its body gets it only once the
        # credentials are known good (Twisted would send it at once).
        expects_continue = "100-continue" in _header(self, b"expect").lower()
        if expects_continue:
            self.requestHeaders.removeHeader(b"expect")
        check = threads.deferToThread(
            _auth_refusal,
            _path(raw_uri),
            raw_uri.decode("latin-1"),
            _header(self, b"cookie"),
            _header(self, b"authorization"),
        )

        def done(refusal):
            if self.auth_check is check:
                self.auth_check = None
            if refusal and not self.refused:
                self._refuse(*refusal)
            elif expects_continue and not self.refused:
                self._continue()

        def failed(failure):
            log.error("Could not check credentials before reading a body: %s", failure.value)
            if not self.refused:
                self._refuse(500, "Internal server error")

        check.addCallbacks(done, failed)
        if not check.called:
            self.auth_check = check

    def _continue(self) -> None:
        channel = self.channel
        # The channel forgets the request line once the body is complete: then it is too late.
        waiting = channel is not None and getattr(channel, "_version", None) == b"HTTP/1.1"
        if waiting and channel.transport is not None:
            channel.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _refuse(self, status: int, message: str) -> None:
        """Answer now and close the connection; whatever body follows is never read."""
        self.refused = True
        self.requestHeaders.removeHeader(b"expect")  # no "100 Continue" after this answer
        path = _path(self.raw_uri)
        response = _refusal(status, message, path, htmx=bool(_header(self, b"hx-request")))
        payload = response.content
        head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}"]
        head += [
            "Connection: close",
            "Content-Security-Policy: default-src 'none'",
            "X-Content-Type-Options: nosniff",
        ]
        head += [f"{name}: {value}" for name, value in response.items()]
        head += [f"Content-Length: {len(payload)}", "", ""]
        log.warning(
            "Refused a request body before reading it",
            extra={"status": status, "path": path, "reason": message},
        )
        channel = self.channel
        if channel is None or channel.transport is None:
            return
        channel.transport.write("\r\n".join(head).encode("latin-1") + payload)
        channel.loseConnection()


def _refusal(status: int, message: str, path: str, htmx: bool) -> HttpResponse:
    """The answer Django would give (core.middleware, core.views), without a Django request: a 302
    carries its address as the message."""
    if status == 302:
        return HttpResponseRedirect(message)
    if is_api_path(path):
        return error_response(status, message)
    if htmx:
        return htmx_error(status, message)
    return HttpResponse(plain_error_page(REASONS.get(status, "Error"), message), status=status)


def install() -> None:
    """Make daphne build its requests with the guard (daphne.http_protocol.HTTPFactory)."""
    http_protocol.WebRequest = GuardedWebRequest
