"""Error pages: JSON under /api/, styled pages elsewhere."""

import html
import logging

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from core import limits
from core.htmx import toast
from core.http import error_response, is_api_path
from core.limits import fields_too_large_message

log = logging.getLogger(__name__)


def error_page(request, status: int, title: str, text: str) -> HttpResponse:
    try:
        page = render_to_string(
            "core/error.html", {"status": status, "title": title, "text": text}, request
        )
    except Exception:  # the error page must never fail (e.g. no database)
        log.exception("Could not render the error page")
        page = plain_error_page(title, text)
    return HttpResponse(page, status=status)


def plain_error_page(title: str, text: str) -> str:
    """The error page without templates: when rendering failed, or before Django is reached."""
    title, text = html.escape(title), html.escape(text)
    return (
        f"<!doctype html><meta charset='utf-8'><title>{title} · Malamar</title>"
        f"<main><h1>{title}</h1><p>{text}</p><p><a href='/'>Back to Malamar</a></p></main>"
    )


def htmx_error(status: int, message: str) -> HttpResponse:
    """An htmx request's refusal: nothing swapped, the message in the error toast."""
    response = HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
    response["HX-Reswap"] = "none"
    return toast(response, message, level="error")


def bad_request(request, exception=None):
    if isinstance(exception, RequestDataTooBig):  # a body longer than it declared
        return too_large_response(request, fields_too_large_message())
    message = "Bad request"
    if exception and exception.__class__.__name__ == "DisallowedHost":
        message = (
            "This host name is not allowed. Malamar only answers to 127.0.0.1, localhost and "
            "the names in MALAMAR_ALLOWED_HOSTS (or --allowed-hosts): add this name there, "
            "e.g. MALAMAR_ALLOWED_HOSTS=box.tail1234.ts.net, and set a password."
        )
    if is_api_path(request.path):
        return error_response(400, message, "BAD_HOST" if "host" in message else None)
    return error_page(request, 400, "Bad request", message)


def forbidden(request, exception=None):
    if is_api_path(request.path):
        return error_response(403, "Forbidden")
    return error_page(request, 403, "Forbidden", "This request was refused.")


def not_found(request, exception=None):
    if is_api_path(request.path):
        return error_response(404, "Not found")
    return error_page(request, 404, "Not found", "There is nothing at this address.")


def server_error(request):
    if is_api_path(request.path):
        return error_response(500, "Internal server error")
    return error_page(
        request, 500, "Something went wrong", "The error was logged. Please try again."
    )


def too_large_response(request: HttpRequest, message: str | None = None) -> HttpResponse:
    """413 in the caller's language: JSON for the API, the error toast for htmx, a page else."""
    message = message or limits.too_large_message(request.META.get("CONTENT_TYPE", ""))
    if is_api_path(request.path):
        return error_response(limits.TOO_LARGE, message)
    if request.headers.get("HX-Request"):
        return htmx_error(limits.TOO_LARGE, message)
    return error_page(request, limits.TOO_LARGE, "Too large", message)


def bad_request_response(request: HttpRequest, message: str) -> HttpResponse:
    """400 in the caller's language: JSON for the API, the error toast for htmx, a page else."""
    if is_api_path(request.path):
        return error_response(400, message)
    if request.headers.get("HX-Request"):
        return htmx_error(400, message)
    return error_page(request, 400, "Bad request", message)
