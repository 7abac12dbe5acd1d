"""Errors raised by services; the API and the pages turn them into 400/404/409 answers."""


class ServiceError(Exception):
    code = "INTERNAL_ERROR"
    status = 500

    def __init__(self, message: str, *, field: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
        # More for API clients, next to the code and message (e.g. the files that conflict).
        self.details = details or {}


class ValidationFailed(ServiceError):
    code = "VALIDATION_ERROR"
    status = 400


class NotFound(ServiceError):
    code = "NOT_FOUND"
    status = 404


class Conflict(ServiceError):
    code = "CONFLICT"
    status = 409


def require_text(
    value: str | None, *, field: str, label: str, max_length: int | None = None
) -> str:
    """Required text fields: present, not only whitespace and (for names and titles) at most
    `max_length` characters. Returns the stripped value."""
    text = (value or "").strip()
    if not text:
        raise ValidationFailed(f"{label} is required", field=field)
    if "\x00" in text:  # PostgreSQL cannot store it (forms and the API refuse it too)
        raise ValidationFailed(f"{label} contains a NUL character", field=field)
    check_length(text, field=field, label=label, max_length=max_length)
    return text


def check_length(text: str, *, field: str, label: str, max_length: int | None) -> None:
    if max_length is not None and len(text) > max_length:
        raise ValidationFailed(
            f"{label} must be at most {max_length} characters (it has {len(text)})", field=field
        )
