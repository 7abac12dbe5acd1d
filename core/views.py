"""Error pages: JSON under /api/, plain pages elsewhere (the UI issues style them)."""

from django.http import HttpResponse

from core.http import error_response, is_api_path


def _page(status: int, title: str, text: str) -> HttpResponse:
    html = (
        f"<!doctype html><meta charset='utf-8'><title>{title} · Malamar</title>"
        f"<main style='font-family:system-ui;max-width:40rem;margin:4rem auto'>"
        f"<h1>{title}</h1><p>{text}</p><p><a href='/'>Back to Malamar</a></p></main>"
    )
    return HttpResponse(html, status=status)


def bad_request(request, exception=None):
    message = "Bad request"
    if exception and exception.__class__.__name__ == "DisallowedHost":
        message = (
            "This host name is not allowed. Malamar only answers to the names it is bound to "
            "(127.0.0.1, localhost); set MALAMAR_HOST to serve another name."
        )
    if is_api_path(request.path):
        return error_response(400, message, "BAD_HOST" if "host" in message else None)
    return _page(400, "Bad request", message)


def forbidden(request, exception=None):
    if is_api_path(request.path):
        return error_response(403, "Forbidden")
    return _page(403, "Forbidden", "This request was refused.")


def not_found(request, exception=None):
    if is_api_path(request.path):
        return error_response(404, "Not found")
    return _page(404, "Not found", "There is nothing at this address.")


def server_error(request):
    if is_api_path(request.path):
        return error_response(500, "Internal server error")
    return _page(500, "Something went wrong", "The error was logged. Please try again.")
