"""Guards for `/api/`: no state change from another site, JSON bodies only, JSON errors always.

A page on any other origin (even another port on localhost) must not be able to create tasks,
because a task runs commands on this machine.
"""

import json

from django.http import HttpRequest

from core.http import error_response, is_api_path

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
