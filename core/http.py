"""JSON error bodies for the API: `{"error": {"code", "message"}}`."""

from django.http import JsonResponse

CODES = {
    400: "VALIDATION_ERROR",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    500: "INTERNAL_ERROR",
}


def error_response(
    status: int, message: str, code: str | None = None, details: dict | None = None
) -> JsonResponse:
    """`details`: more fields of the error object (never `code` or `message`)."""
    code = code or CODES.get(status, "ERROR" if status < 500 else "INTERNAL_ERROR")
    error = {**(details or {}), "code": code, "message": message}
    return JsonResponse({"error": error}, status=status)


API_DOCS_PATH = "/api/docs"  # a page people open in a browser, though under /api/


def is_api_path(path: str) -> bool:
    """Answered as JSON (errors, sign-in refusals); the docs page is answered like a page."""
    return (path == "/api" or path.startswith("/api/")) and path != API_DOCS_PATH
