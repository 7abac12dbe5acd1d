"""Reading JSON request bodies for the API: anything but a clean JSON object is a clear 400.

`json.loads` accepts things the rest of the stack cannot store or send: a lone UTF-16
surrogate ("\\ud800") cannot be encoded as UTF-8 (the database and every response would fail),
and a NUL character is refused by form fields and by PostgreSQL. Both are refused here, for
every endpoint at once, with the name of the field that holds them.
"""

import json
import math

from ninja.parser import Parser

NESTING_MESSAGE = "The JSON body is nested too deeply"
# Whole numbers the database can store (SQLite and PostgreSQL: signed 64 bits).
INT_RANGE = (-(2**63), 2**63 - 1)


class BodyRefused(ValueError):
    """A body the API will not read; the message says why (shown to the client)."""


def _bad_text(text: str) -> str | None:
    if "\x00" in text:
        return "contains a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains an invalid character (a lone UTF-16 surrogate such as \\ud800)"
    return None


def _where(path: list) -> str:
    return ".".join(str(p) for p in path) or "body"


def check_text(value, path: list | None = None) -> None:
    """Raise BodyRefused for the first string (key or value) that cannot be stored."""
    stack = [(value, path or [])]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            problem = _bad_text(item)
            if problem:
                raise BodyRefused(f"{_where(where)}: {problem}")
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = _bad_text(key)
                if problem:
                    raise BodyRefused(f"{_where(where)}: a field name {problem}")
                stack.append((child, [*where, key]))
        elif isinstance(item, list):
            stack.extend((child, [*where, index]) for index, child in enumerate(item))


def _int(text: str) -> int:
    value = int(text)
    if not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise BodyRefused(f"The number {text[:30]} is too large")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BodyRefused(f"The number {text[:30]} is too large")
    return value


def _constant(name: str):
    raise BodyRefused(f"The body is not valid JSON: {name} is not a number in JSON")


def parse_json_object(raw: bytes) -> dict:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyRefused(f"The body is not valid UTF-8 (byte {exc.start})") from None
    try:
        data = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except BodyRefused:
        raise
    except RecursionError:
        raise BodyRefused(NESTING_MESSAGE) from None
    except ValueError as exc:
        raise BodyRefused(f"The body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BodyRefused('The body must be a JSON object, e.g. {"field": "value"}')
    check_text(data)
    return data


class JsonObjectParser(Parser):
    """django-ninja's parser for every endpoint (see core/api.py)."""

    def parse_body(self, request):
        return parse_json_object(request.body)

    def parse_querydict(self, data, list_fields, request):
        result = super().parse_querydict(data, list_fields, request)
        check_text(result)
        return result
