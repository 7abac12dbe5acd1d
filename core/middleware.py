"""Guards for `/api/`: no state change from another site, JSON bodies only, JSON errors always.

A page on any other origin (even another port on localhost) must not be able to create tasks,
because a task runs commands on this machine.
"""

import ipaddress
import json
from urllib.parse import quote

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponseForbidden
from django.shortcuts import redirect
from django_eventstream.utils import get_storage

from core import limits
from core.auth import SESSION_FLAG, bearer_valid, password_is_set
from core.config import is_loopback
from core.http import error_response, is_api_path
from core.views import bad_request_response, too_large_response

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# The one endpoint that takes files (DESIGN "Files"); the origin check still applies.
MULTIPART_SUFFIX = "/attachments"


def _cross_site(request: HttpRequest) -> str | None:
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site and fetch_site not in ("same-origin", "none"):
        return f"Cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("Origin")
    if origin is not None:
        expected = f"{request.scheme}://{request.get_host()}"
        if origin != expected:
            return f"Cross-site request refused (Origin: {origin})"
    return None


def _has_body(request: HttpRequest) -> bool:
    length = request.headers.get("Content-Length")
    if length and length.strip() not in ("", "0"):
        return True
    return bool(request.headers.get("Transfer-Encoding"))


def _unsupported_type(request: HttpRequest) -> str | None:
    if not _has_body(request):
        return None
    content_type = (request.content_type or "").lower()
    if content_type == "application/json":
        return None
    if content_type == "multipart/form-data" and request.path.endswith(MULTIPART_SUFFIX):
        return None
    return f"Request bodies must be application/json (got {content_type or 'no content type'})"


class ApiGuardMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        if not is_api_path(request.path):
            return self.get_response(request)
        if request.method not in SAFE_METHODS:
            refused = _cross_site(request)
            if refused:
                return error_response(403, refused)
            unsupported = _unsupported_type(request)
            if unsupported:
                return error_response(415, unsupported)
        response = self.get_response(request)
        return _as_json_error(response)


def _as_json_error(response):
    """Whatever answered with an error (405s, Django's own 404/500...), the API speaks JSON."""
    if response.status_code < 400 or getattr(response, "streaming", False):
        return response
    if response.get("Content-Type", "").startswith("application/json"):
        try:
            body = json.loads(response.content or b"{}")
        except ValueError:
            body = {}
        if isinstance(body, dict) and "error" in body:
            return response
    messages = {405: "Method not allowed", 404: "Not found", 500: "Internal server error"}
    message = messages.get(response.status_code, response.reason_phrase)
    return error_response(response.status_code, message)


class RequestSizeMiddleware:
    """Refuse a body over its limit (core.limits) with a 413, before anything reads it.

    The server already refuses a declared oversize body before receiving it
    (malamar_site/body_guard.py); this makes every entry point (tests, other servers) agree, and
    turns Django's RequestDataTooBig (a body longer than it declared) into the same answer.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        content_type = request.META.get("CONTENT_TYPE", "")
        if limits.declared_too_large(request.META.get("CONTENT_LENGTH"), content_type):
            return too_large_response(request)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception):
        if isinstance(exception, RequestDataTooBig):
            return too_large_response(request, limits.fields_too_large_message())
        return None


class NulCharacterMiddleware:
    """Refuse an address holding a NUL character (`%00` in the path or the query) with a 400:
    no id, name or search can hold one, and PostgreSQL refuses NUL even in a lookup (a 500)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        problem = _nul_in_address(request)
        if problem:
            return bad_request_response(request, problem)
        return self.get_response(request)


def _nul_in_address(request: HttpRequest) -> str | None:
    if "\x00" in request.path:
        return "The address contains a NUL character"
    for name, values in request.GET.lists():
        if "\x00" in name or any("\x00" in value for value in values):
            return f"{name.replace(chr(0), '')}: contains a NUL character"
    return None


# Paths reachable without signing in when a password is set. Not the admin: it sits behind
# Malamar's login, then asks for its own user login.
OPEN_PREFIXES = ("/login/", "/static/", "/favicon.ico")
SIGN_IN_MESSAGE = "Sign in first, or send an API token: Authorization: Bearer <token>"


def login_url(next_path: str) -> str:
    return f"/login/?next={quote(next_path)}"


class LoginRequiredMiddleware:
    """With a password set: every page, API route and the event stream needs a session (from
    the login page) or an API token (`Authorization: Bearer mlm_...`)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        # Kept for the page's context processor (core.context_processors.access): one read.
        request.password_is_set = password_is_set()
        if not request.password_is_set:
            refused = _unprotected_network_request(request)
            return refused or self.get_response(request)
        if request.path.startswith(OPEN_PREFIXES):
            return self.get_response(request)
        if request.session.get(SESSION_FLAG):
            return self.get_response(request)
        if bearer_valid(request.headers.get("Authorization")):
            return self.get_response(request)
        if is_api_path(request.path):
            return error_response(401, SIGN_IN_MESSAGE)
        return redirect(login_url(request.get_full_path()))


NO_PASSWORD_REMOTE = (
    "Malamar has no password, so it only answers on this machine. Set one (malamar "
    "set-password) or start it with --no-auth / MALAMAR_NO_AUTH=1 to accept the risk."
)


def _unprotected_network_request(request: HttpRequest):
    """Every way of starting checks its bind address (core.auth.remote_access_refusal); this
    backs it up for any other (another ASGI server, an unusual bind): without a password, a
    request that reached a non-loopback address of this machine is refused."""
    local = request.META.get("SERVER_NAME", "")
    if settings.CONFIG.no_auth or not _is_ip(local) or is_loopback(local):
        return None
    if is_api_path(request.path):
        return error_response(403, NO_PASSWORD_REMOTE)
    return HttpResponseForbidden(NO_PASSWORD_REMOTE, content_type="text/plain; charset=utf-8")


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        return False
    return True


class SecurityHeadersMiddleware:
    """A strict Content-Security-Policy (no inline script, no eval) and friends."""

    POLICY = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )
    # Django's admin uses inline styles in a few widgets.
    ADMIN_POLICY = POLICY.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        response = self.get_response(request)
        policy = self.ADMIN_POLICY if request.path.startswith("/admin/") else self.POLICY
        response.headers.setdefault("Content-Security-Policy", policy)
        response.headers.setdefault(
            "Permissions-Policy", "camera=(), microphone=(), geolocation=()"
        )
        response.headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response


class LivePositionMiddleware:
    """A full page remembers where the event stream stood before its data was read, and its
    EventSource resumes from there (base.html `data-live-from`): an event committed between
    the render and the stream's connection is replayed instead of missed."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        if _is_full_page(request):
            request.live_from = live_position()
        return self.get_response(request)


def _is_full_page(request: HttpRequest) -> bool:
    """Any request but htmx's and the API's may answer with a page (a form posted without
    JavaScript is answered with the page and its errors)."""
    api_or_static = request.path.startswith(("/api/", "/static/"))
    return "HX-Request" not in request.headers and not api_or_static


def live_position() -> str:
    """The stream's newest event id as an SSE Last-Event-ID (`channel:id`)."""
    channel = settings.EVENTS_CHANNEL
    return f"{channel}:{get_storage().get_current_id(channel)}"
