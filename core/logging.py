"""Log formatters for the spec's two formats: text and JSON, one line per record, on stdout.

Plus a filter that keeps requests anyone can send from flooding the log with tracebacks."""

import json
import logging
from datetime import UTC, datetime

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
LEVEL_NAMES = {"WARNING": "WARN", "CRITICAL": "ERROR"}


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _context(record: logging.LogRecord) -> dict:
    context = {k: v for k, v in vars(record).items() if k not in _STANDARD}
    if record.exc_info:
        context["error"] = logging.Formatter().formatException(record.exc_info)
    return context


def _level(record: logging.LogRecord) -> str:
    return LEVEL_NAMES.get(record.levelname, record.levelname)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = f"[{_timestamp(record)}] [{_level(record)}] {record.getMessage()}"
        context = _context(record)
        if context:
            line += " " + json.dumps(context, default=str)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            {
                "timestamp": _timestamp(record),
                "level": _level(record).lower(),
                "message": record.getMessage(),
                "logger": record.name,
                "context": _context(record),
            },
            default=str,
        )


MAX_CLIENT_MESSAGE = 300


class SuspiciousRequestFilter(logging.Filter):
    """Django logs every refused request (a Host not allowed, a body too big, too many fields...)
    on `django.security.*` as an ERROR with a full traceback: anyone who can reach the port could
    flood the log that way. Such a refusal is the client's problem: one short WARNING line.
    4xx lines of `django.request` ("Not Found: <path>") are cut short too: the path is the
    client's and may be kilobytes long. Server errors (5xx) keep their traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        refused = record.name.startswith("django.security.")
        client_error = record.name == "django.request" and record.levelno <= logging.WARNING
        if not (refused or client_error):
            return True
        if refused and record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text, record.stack_info = None, None, None
        message = record.getMessage()
        if len(message) > MAX_CLIENT_MESSAGE:
            message = message[:MAX_CLIENT_MESSAGE] + "…"
        record.msg, record.args = message, None
        request = getattr(record, "request", None)
        if request is not None and hasattr(request, "META"):
            record.request = f"{request.method} {request.path[:200]}"
            record.client = request.META.get("REMOTE_ADDR") or "unknown"
        return True
