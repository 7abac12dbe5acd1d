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


def loads_storable(text: str):
    """`json.loads` for CLI output: the result has only storable strings (see `scrub`), and
    JSON nested too deeply is a ValueError like any other invalid JSON (not a RecursionError
    that would escape the callers' `except ValueError`)."""
    try:
        return scrub(json.loads(text))
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
