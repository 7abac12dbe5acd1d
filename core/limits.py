"""How large a request body may be, decided from its headers alone.

Two limits (README "Configuration"): file uploads (multipart/form-data, the chat attachments)
may be up to MALAMAR_MAX_UPLOAD_BYTES; every other body (JSON, form posts) up to
MALAMAR_MAX_JSON_BYTES. The server refuses a body that declares more before reading it
(malamar_site/body_guard.py), and Django's own limit (DATA_UPLOAD_MAX_MEMORY_SIZE) is the same
number, so a body that grows past it without declaring its length is refused too.
"""

from django.conf import settings

TOO_LARGE = 413


def is_upload(content_type: str) -> bool:
    return content_type.split(";", 1)[0].strip().lower() == "multipart/form-data"


def body_limit(content_type: str) -> int:
    """The largest body accepted with this Content-Type."""
    if is_upload(content_type):
        return settings.CONFIG.max_upload_bytes
    return settings.CONFIG.max_json_bytes


def human_size(size: int) -> str:
    """1048576 → "1 MB", 1536 → "1.5 KB" (binary units, as the limits are usually set)."""
    value = float(size)
    for unit in ("bytes", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            text = f"{value:.1f}".removesuffix(".0")
            return f"{text} {unit}"
        value /= 1024
    return f"{size} bytes"  # pragma: no cover


def too_large_message(content_type: str) -> str:
    limit = body_limit(content_type)
    if is_upload(content_type):
        return (
            f"The upload is too large: at most {human_size(limit)} per request "
            "(MALAMAR_MAX_UPLOAD_BYTES)"
        )
    return (
        f"The request is too large: at most {human_size(limit)} per request "
        "(MALAMAR_MAX_JSON_BYTES)"
    )


def fields_too_large_message() -> str:
    """For Django's RequestDataTooBig: the non-file data passed DATA_UPLOAD_MAX_MEMORY_SIZE,
    which is the JSON limit (a body longer than it declared, or large form fields)."""
    return too_large_message("application/json")


def declared_too_large(content_length: str | None, content_type: str) -> bool:
    """Whether the Content-Length header (absent or not a number: unknown) passes the limit."""
    length = (content_length or "").strip()
    return length.isdigit() and int(length) > body_limit(content_type)
