"""Global settings: defaults, validation, merging, and masking of secrets.

Secrets (the Mailgun key, CLI environment values) are stored in full and never returned in
full. Updates merge: an omitted value, or the mask itself, keeps what is stored; None deletes.
"""

import copy

from django.db import transaction

from core import events
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


def _default_cli_settings() -> dict:
    return {cli: {"binary_path": "", "env": {}} for cli in CLI_TYPES}


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


def settings_get() -> dict:
    """All settings with defaults filled in (full secrets: for the worker and mailers only)."""
    values = copy.deepcopy(DEFAULTS)
    for row in Setting.objects.filter(key__in=DEFAULTS):
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


def _merge_text(key: str, new, stored: str):
    if new is None:
        return ""
    if not isinstance(new, str):
        raise ValidationFailed(f"{key} must be a string", field=key)
    if key in SECRET_KEYS and _is_mask_of(new, stored):
        return stored
    return new.strip()


def _merge_cli(cli: str, new, stored: dict) -> dict:
    if new is None:
        return {"binary_path": "", "env": {}}
    if not isinstance(new, dict):
        raise ValidationFailed(f"cli_settings.{cli} must be an object", field=f"cli_settings.{cli}")
    unknown = set(new) - {"binary_path", "env"}
    if unknown:
        field = f"cli_settings.{cli}.{sorted(unknown)[0]}"
        raise ValidationFailed(f"{field} is not a known setting", field=field)
    merged = copy.deepcopy(stored)
    if "binary_path" in new:
        path = new["binary_path"]
        if path is not None and not isinstance(path, str):
            field = f"cli_settings.{cli}.binary_path"
            raise ValidationFailed(f"{field} must be a string", field=field)
        merged["binary_path"] = (path or "").strip()
    if "env" in new:
        merged["env"] = _merge_env(cli, new["env"], stored.get("env", {}))
    return merged


def _merge_env(cli: str, new, stored: dict) -> dict:
    field = f"cli_settings.{cli}.env"
    if new is None:
        return {}
    if not isinstance(new, dict):
        raise ValidationFailed(f"{field} must be an object of NAME: value", field=field)
    merged = dict(stored)
    for name, value in new.items():
        if not isinstance(name, str) or not name.strip() or "=" in name or "\0" in name:
            raise ValidationFailed(f"{field} has an invalid variable name {name!r}", field=field)
        name = name.strip()
        if value is None:
            merged.pop(name, None)
        elif not isinstance(value, str) or "\0" in value:
            raise ValidationFailed(f"{field}.{name} must be a string", field=f"{field}.{name}")
        elif not _is_mask_of(value, stored.get(name, "")):
            merged[name] = value
    return merged


def _clean_urls(key: str, value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):  # one per line, as a form sends them
        value = value.splitlines()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationFailed(f"{key} must be a list of URLs", field=key)
    urls = [v.strip() for v in value if v.strip()]
    for url in urls:
        if not url.startswith(URL_PREFIXES) or any(c.isspace() for c in url):
            raise ValidationFailed(f"{key}: {url!r} is not an http(s) URL", field=key)
    return urls


def settings_update(*, changes: dict) -> dict:
    """Merge `changes` into the stored settings; returns the public (masked) view."""
    changes = {k: v for k, v in changes.items() if k not in READ_ONLY_KEYS}
    unknown = set(changes) - set(DEFAULTS)
    if unknown:
        key = sorted(unknown)[0]
        raise ValidationFailed(f"{key} is not a known setting", field=key)
    current = settings_get()
    updates = {}
    for key, new in changes.items():
        if key in TEXT_KEYS:
            updates[key] = _merge_text(key, new, current[key])
            url = updates[key] if key == "knowledge_base_url" else ""
            if url and not url.startswith(URL_PREFIXES):
                raise ValidationFailed(f"{key} must start with https:// or http://", field=key)
        elif key in CHOICE_KEYS:
            if new not in CHOICE_KEYS[key]:
                choices = " or ".join(CHOICE_KEYS[key])
                raise ValidationFailed(f"{key} must be {choices}", field=key)
            updates[key] = new
        elif key == "stall_warning_minutes":
            if isinstance(new, bool) or not isinstance(new, int | float) or new <= 0:
                raise ValidationFailed(f"{key} must be a number of minutes above 0", field=key)
            updates[key] = new
        elif key == "webhook_urls":
            updates[key] = _clean_urls(key, new)
        elif key in BOOL_KEYS:
            if not isinstance(new, bool):
                raise ValidationFailed(f"{key} must be true or false", field=key)
            updates[key] = new
        elif key == "cli_settings":
            if not isinstance(new, dict):
                raise ValidationFailed("cli_settings must be an object", field=key)
            clis = copy.deepcopy(current["cli_settings"])
            for cli, conf in new.items():
                if cli not in CLI_TYPES:
                    field = f"cli_settings.{cli}"
                    raise ValidationFailed(f"{field} is not a supported CLI", field=field)
                clis[cli] = _merge_cli(cli, conf, clis[cli])
            updates[key] = clis
    with transaction.atomic():
        for key, value in updates.items():
            Setting.objects.update_or_create(key=key, defaults={"value": value})
        events.publish("settings.updated", {"keys": sorted(updates)})
    return settings_public()
