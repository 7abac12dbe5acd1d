"""Log formatters for the spec's two formats: text and JSON, one line per record, on stdout."""

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
