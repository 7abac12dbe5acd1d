"""Errors raised by services; the API and the pages turn them into 400/404/409 answers."""


class ServiceError(Exception):
    code = "INTERNAL_ERROR"
    status = 500

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field


class ValidationFailed(ServiceError):
    code = "VALIDATION_ERROR"
    status = 400


class NotFound(ServiceError):
    code = "NOT_FOUND"
    status = 404


class Conflict(ServiceError):
    code = "CONFLICT"
    status = 409


def require_text(value: str | None, *, field: str, label: str) -> str:
    """Required text fields: present and not only whitespace. Returns the stripped value."""
    text = (value or "").strip()
    if not text:
        raise ValidationFailed(f"{label} is required", field=field)
    return text
