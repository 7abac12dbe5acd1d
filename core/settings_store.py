"""Global settings: defaults, validation, merging, and masking of secrets.

Secrets (the Mailgun key, CLI environment values) are stored in full and never returned in
full. Updates merge: an omitted value, or the mask itself, keeps what is stored; None deletes.

`settings_update` is the one place that validates settings: the pages and the JSON API both
save through it, and it reports every invalid field at once (`SettingsInvalid.errors`).
"""

import copy
import math
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction

from core import events
from core.compiled_queries import compiled_models
from core.errors import ValidationFailed
from core.models import Setting

CLI_TYPES = ("claude", "gemini", "codex", "opencode")
MASK_PREFIX = "••••"
SECRET_KEYS = frozenset({"mailgun_api_key"})
MAILGUN_KEYS = ("mailgun_api_key", "mailgun_domain", "mailgun_from_email", "mailgun_to_email")
# knowledge_base_url: optional remote knowledge base the Malamar agent may also consult.
TEXT_KEYS = (*MAILGUN_KEYS, "knowledge_base_url")
BOOL_KEYS = ("notify_on_error", "notify_on_in_review")
CHOICE_KEYS = {"mailgun_region": ("us", "eu")}
READ_ONLY_KEYS = frozenset({"mailgun_configured"})  # derived; a form may send it back
URL_PREFIXES = ("https://", "http://")
EMAIL_KEYS = ("mailgun_from_email", "mailgun_to_email")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SettingsInvalid(ValidationFailed):
    """One or more settings are invalid: `errors` maps each field to its message.

    The message (the API's) names each field; a page shows each message on its field."""

    def __init__(self, errors: dict[str, str]):
        self.errors = errors
        field = next(iter(errors))
        message = "; ".join(f"{key}: {text}" for key, text in errors.items())
        super().__init__(message, field=field)


# How long a CLI's health prompt may take (seconds, from the CLI's first output where it
# streams): a check measures whether the CLI can answer, not how busy the machine is (DESIGN
# "Health checks"); one that takes longer says "slow to answer" and blocks nothing.
HEALTH_TIMEOUT_DEFAULT = 90
HEALTH_TIMEOUT_RANGE = (5, 3600)


def _default_cli_settings() -> dict:
    return {
        cli: {"binary_path": "", "env": {}, "health_timeout_seconds": HEALTH_TIMEOUT_DEFAULT}
        for cli in CLI_TYPES
    }


DEFAULTS = {
    "mailgun_api_key": "",
    "mailgun_domain": "",
    "mailgun_from_email": "",
    "mailgun_to_email": "",
    "mailgun_region": "us",
    "knowledge_base_url": "",
    "webhook_urls": [],
    "stall_warning_minutes": 15,
    "notify_on_error": True,
    "notify_on_in_review": True,
    "cli_settings": _default_cli_settings(),
}


def mask(value: str) -> str:
    """Show enough to recognise a secret, never enough to use it."""
    if not value:
        return ""
    return MASK_PREFIX + (value[-4:] if len(value) >= 12 else "")


def _is_mask_of(candidate, stored: str) -> bool:
    return isinstance(candidate, str) and bool(stored) and candidate == mask(stored)


def _stored():
    return Setting.objects.filter(key__in=list(DEFAULTS))


def settings_get() -> dict:
    """All settings with defaults filled in (full secrets: for the worker and mailers only)."""
    values = copy.deepcopy(DEFAULTS)
    for row in compiled_models(("settings_get",), _stored):  # (read at every pass's begin)
        if row.key == "cli_settings":
            for cli, conf in (row.value or {}).items():
                if cli in values["cli_settings"] and isinstance(conf, dict):
                    values["cli_settings"][cli].update(conf)
        else:
            values[row.key] = row.value
    return values


def settings_public() -> dict:
    """Settings as the API and pages show them: secrets masked."""
    values = settings_get()
    for key in SECRET_KEYS:
        values[key] = mask(values[key])
    for conf in values["cli_settings"].values():
        conf["env"] = {name: mask(value) for name, value in conf["env"].items()}
    values["mailgun_configured"] = mailgun_configured(settings_get())
    return values


def mailgun_configured(values: dict) -> bool:
    return all(values.get(key) for key in MAILGUN_KEYS)


def cli_settings_for(cli_type: str) -> dict:
    return settings_get()["cli_settings"][cli_type]


def binary_problem(path: str) -> str:
    """What is wrong with a CLI binary path ("" when it can be run): missing, not a file, not
    executable. The settings check it on save; the worker says the same when it cannot run it."""
    resolved = Path(path).expanduser()
    if not resolved.is_absolute():
        return f"{path} is not an absolute path (e.g. /usr/local/bin/claude)"
    try:
        if not resolved.exists():
            return f"{path} does not exist"
        if not resolved.is_file():
            return f"{path} is not a file"
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    if not os.access(resolved, os.X_OK):
        return f"{path} is not executable"
    return ""


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(message, field=field)


def _merge_text(key: str, new, stored: str):
    if new is None:
        return ""
    if not isinstance(new, str):
        raise _invalid(key, "must be a string")
    if key in SECRET_KEYS and _is_mask_of(new, stored):
        return stored
    value = new.strip()
    if value and key in EMAIL_KEYS:
        try:
            validate_email(value)
        except ValidationError:
            raise _invalid(key, f"{value} is not a valid email address") from None
    if value and key == "knowledge_base_url":
        _check_url(key, value)
    return value


def _check_url(key: str, url: str) -> None:
    """An http(s) URL with a host, no spaces."""
    if not url.startswith(URL_PREFIXES) or any(c.isspace() for c in url):
        raise _invalid(key, f"{url} is not an http(s) URL")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        raise _invalid(key, f"{url} is not a valid URL") from None
    if not host:
        raise _invalid(key, f"{url} has no host name")


def _merge_cli(cli: str, new, stored: dict) -> dict:
    if new is None:
        return _default_cli_settings()[cli]
    if not isinstance(new, dict):
        raise _invalid(f"cli_settings.{cli}", "must be an object")
    unknown = set(new) - {"binary_path", "env", "health_timeout_seconds"}
    if unknown:
        raise _invalid(f"cli_settings.{cli}.{sorted(unknown)[0]}", "is not a known setting")
    merged = copy.deepcopy(stored)
    if "binary_path" in new:
        field = f"cli_settings.{cli}.binary_path"
        path = new["binary_path"]
        if path is not None and not isinstance(path, str):
            raise _invalid(field, "must be a string")
        merged["binary_path"] = (path or "").strip()
        problem = binary_problem(merged["binary_path"]) if merged["binary_path"] else ""
        if problem:
            raise _invalid(field, problem)
    if "env" in new:
        merged["env"] = _merge_env(cli, new["env"], stored.get("env", {}))
    if "health_timeout_seconds" in new:
        merged["health_timeout_seconds"] = _clean_health_timeout(cli, new["health_timeout_seconds"])
    return merged


def _clean_health_timeout(cli: str, value) -> int:
    low, high = HEALTH_TIMEOUT_RANGE
    if value is None:
        return HEALTH_TIMEOUT_DEFAULT
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(
            f"cli_settings.{cli}.health_timeout_seconds",
            f"Enter a whole number of seconds from {low} to {high}",
        )
    return value


def _merge_env(cli: str, new, stored: dict) -> dict:
    field = f"cli_settings.{cli}.env"
    if new is None:
        return {}
    if not isinstance(new, dict):
        raise _invalid(field, "must be an object of NAME: value")
    merged = dict(stored)
    for name, value in new.items():
        name = name.strip() if isinstance(name, str) else ""
        if not name:
            raise _invalid(field, "Each variable needs a name.")
        if not ENV_NAME.match(name):
            message = f"“{name}” is not a valid name: use letters, digits and underscores."
            raise _invalid(field, message)
        if value is None:
            merged.pop(name, None)
        elif not isinstance(value, str):
            raise _invalid(f"{field}.{name}", "must be a string")
        elif "\0" in value:
            raise _invalid(f"{field}.{name}", f"The value of “{name}” contains a NUL character.")
        elif not _is_mask_of(value, stored.get(name, "")):
            merged[name] = value
    return merged


def _clean_urls(key: str, value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):  # one per line, as a form sends them
        value = value.splitlines()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _invalid(key, "must be a list of URLs")
    urls = [v.strip() for v in value if v.strip()]
    for url in urls:
        _check_url(key, url)
    return urls


def _clean_value(key: str, new, current: dict):
    """One setting, validated and merged with what is stored (raises ValidationFailed)."""
    if key in TEXT_KEYS:
        return _merge_text(key, new, current[key])
    if key in CHOICE_KEYS:
        if new not in CHOICE_KEYS[key]:
            raise _invalid(key, f"must be {' or '.join(CHOICE_KEYS[key])}")
        return new
    if key == "stall_warning_minutes":
        number = isinstance(new, int | float) and not isinstance(new, bool)
        if not number or not math.isfinite(new) or new <= 0:
            raise _invalid(key, "Enter a number of minutes above 0")
        return new
    if key == "webhook_urls":
        return _clean_urls(key, new)
    if key in BOOL_KEYS:
        if not isinstance(new, bool):
            raise _invalid(key, "must be true or false")
        return new
    if key == "cli_settings":
        if not isinstance(new, dict):
            raise _invalid(key, "must be an object")
        clis = copy.deepcopy(current["cli_settings"])
        for cli, conf in new.items():
            if cli not in CLI_TYPES:
                raise _invalid(f"cli_settings.{cli}", "is not a supported CLI")
            clis[cli] = _merge_cli(cli, conf, clis[cli])
        return clis
    raise _invalid(key, "is not a known setting")


def settings_update(*, changes: dict) -> dict:
    """Validate and merge `changes` into the stored settings; returns the public (masked) view.

    Nothing is stored unless every change is valid: SettingsInvalid lists each invalid field."""
    changes = {k: v for k, v in changes.items() if k not in READ_ONLY_KEYS}
    current = settings_get()
    updates, errors = {}, {}
    for key, new in changes.items():
        try:
            updates[key] = _clean_value(key, new, current)
        except ValidationFailed as error:
            errors[error.field or key] = error.message
    if errors:
        raise SettingsInvalid(errors)
    with transaction.atomic():
        for key, value in updates.items():
            Setting.objects.update_or_create(key=key, defaults={"value": value})
        events.publish("settings.updated", {"keys": sorted(updates)})
    return settings_public()
