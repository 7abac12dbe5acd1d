"""Text the database and every response can hold: no lone UTF-16 surrogates, no NUL.

JSON can spell both ("\\ud800", "\\u0000"). Requests carrying them are refused
(core.json_input); what agents' CLIs print is kept, cleaned with `scrub`.
"""

import json
import re

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _scrub_text(text: str) -> str:
    if not _UNSTORABLE.search(text):
        return text
    return _UNSTORABLE.sub(lambda m: "" if m.group() == "\x00" else "\ufffd", text)


def scrub(value):
    """A copy of parsed JSON whose strings can be stored: a lone surrogate becomes U+FFFD and
    NUL characters are dropped. For what agents' CLIs print, which is not refused but kept."""
    if isinstance(value, str):
        return _scrub_text(value)
    if isinstance(value, dict):
        return {_scrub_text(key): scrub(child) for key, child in value.items()}
    if isinstance(value, list):
        return [scrub(child) for child in value]
    return value


def storable_text(data: bytes) -> str:
    """Bytes a CLI printed as text the database can hold: invalid UTF-8 becomes U+FFFD and NUL
    characters are dropped (PostgreSQL refuses them in text; SQLite would keep them)."""
    return _scrub_text(data.decode("utf-8", errors="replace"))


# Deeper than any real answer or stream event, shallow enough that whatever reads the value
# next (scrub, validation, json.dumps into the database) stays far from the recursion limit.
MAX_JSON_DEPTH = 200


def loads_storable(text: str):
    """`json.loads` for what a CLI printed or wrote. Every problem is a ValueError, including
    nesting deeper than MAX_JSON_DEPTH (json.loads itself raises RecursionError for ~1,000
    levels, which callers would take for a bug in Malamar); the result has only storable
    strings (see `scrub`)."""
    too_deep = f"nested more than {MAX_JSON_DEPTH} levels deep"
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(too_deep) from None
    if _depth_exceeds(value, MAX_JSON_DEPTH):
        raise ValueError(too_deep)
    return scrub(value)


def _depth_exceeds(value, limit: int) -> bool:
    """Whether arrays/objects nest deeper than `limit` (iterative: no recursion of its own)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
