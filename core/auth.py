"""Optional password protection for remote use: one password, sessions, API bearer tokens.

Without a password Malamar only serves loopback (or the user passed --no-auth knowingly).
The password is stored hashed (Django's hasher) in the settings table, under a key the settings
API never returns; tokens are stored as SHA-256 hashes and shown once.
"""

import hashlib
import hmac
import secrets
import threading
import time
from importlib import import_module

from django.conf import settings
from django.contrib.auth.hashers import check_password, make_password
from django.db import DatabaseError, transaction
from django.utils import timezone

from core.config import is_loopback
from core.errors import NotFound, ValidationFailed, require_text
from core.ids import new_id
from core.models import ApiToken, Setting

PASSWORD_KEY = "auth_password_hash"
SESSION_FLAG = "malamar_authenticated"
MIN_PASSWORD_LENGTH = 8
TOKEN_PREFIX = "mlm_"


def password_is_set() -> bool:
    return Setting.objects.filter(key=PASSWORD_KEY).exclude(value=None).exists()


def password_set(*, raw: str | None) -> None:
    """Set (or with None, remove) the password; existing sessions stay valid until they end."""
    if raw is None:
        Setting.objects.filter(key=PASSWORD_KEY).delete()
        return
    if len(raw) < MIN_PASSWORD_LENGTH:
        raise ValidationFailed(
            f"The password needs at least {MIN_PASSWORD_LENGTH} characters", field="password"
        )
    Setting.objects.update_or_create(key=PASSWORD_KEY, defaults={"value": make_password(raw)})


def password_check(raw: str) -> bool:
    row = Setting.objects.filter(key=PASSWORD_KEY).first()
    return bool(row and row.value) and check_password(raw or "", row.value)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_create(*, name: str) -> tuple[ApiToken, str]:
    """A new API token; the raw value is returned once and never stored."""
    name = require_text(name, field="name", label="Name")[:100]
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        token = ApiToken.objects.create(
            id=new_id(), name=name, prefix=raw[: len(TOKEN_PREFIX) + 4], token_hash=_hash(raw)
        )
    return token, raw


def token_revoke(*, token_id: str) -> None:
    if not ApiToken.objects.filter(id=token_id).delete()[0]:
        raise NotFound("Token not found")


def token_check(raw: str) -> bool:
    if not raw.startswith(TOKEN_PREFIX):
        return False
    digest = _hash(raw)
    token = ApiToken.objects.filter(token_hash=digest).first()
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        return False
    ApiToken.objects.filter(id=token.id).update(last_used_at=timezone.now())
    return True


def session_signed_in(session_key: str | None) -> bool:
    """Whether the session with this key (the session cookie's value) has signed in."""
    if not session_key:
        return False
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return bool(store.get(SESSION_FLAG))


def bearer_valid(authorization: str | None) -> bool:
    """An `Authorization: Bearer mlm_...` header with a valid API token."""
    header = authorization or ""
    return header.startswith("Bearer ") and token_check(header[7:].strip())


def access_mode(*, password_set: bool | None = None) -> str:
    """For doctor and the settings page (`password_set`: known already, e.g. no database yet)."""
    config = settings.CONFIG
    if password_is_set() if password_set is None else password_set:
        return "password required"
    if config.is_remote and config.no_auth:
        return "remote WITHOUT a password (--no-auth)"
    return "local only (no password)"


def remote_access_refusal(
    *, bind: str | None = None, password_set: bool | None = None
) -> str | None:
    """Why a server must not start: reachable from other machines with no password.

    The one check every way of starting the server calls (`malamar`, `manage.py runserver`,
    daphne loading `malamar_site.asgi`), with the address it really binds to (default: the
    configured host). `--no-auth` / MALAMAR_NO_AUTH=1 accepts the risk. `password_set`: known
    already (doctor on a data dir with no database yet), else read."""
    config = settings.CONFIG
    bind = config.host if bind is None else bind
    if not config.is_remote_on(bind) or config.no_auth:
        return None
    if password_set is None:
        try:
            password_set = password_is_set()
        except DatabaseError:  # no readable database (not migrated yet): no password either
            password_set = False
    if password_set:
        return None
    where = ", ".join(dict.fromkeys(h for h in (bind, *config.allowed_hosts) if not is_loopback(h)))
    return (
        f"Refusing to start: Malamar would be reachable as {where} without a password.\n"
        "Anyone who can reach it can make your AI CLIs run commands on this machine.\n"
        "Either set a password first:   malamar set-password\n"
        "or accept the risk explicitly: malamar --no-auth, or MALAMAR_NO_AUTH=1 for any other\n"
        "way of starting it (e.g. behind Tailscale ACLs)"
    )


class RateLimiter:
    """At most `limit` attempts per `window` seconds per client (kept in this process)."""

    PRUNE_ABOVE = 1000  # clients remembered before the ones with no recent attempt are dropped

    def __init__(self, limit: int = 10, window: float = 60.0):
        self.limit, self.window = limit, window
        self.attempts: dict[str, list[float]] = {}
        self.reported: dict[str, float] = {}
        self.lock = threading.Lock()

    def allow(self, client: str) -> bool:
        now = time.monotonic()
        with self.lock:
            if len(self.attempts) > self.PRUNE_ABOVE:
                self._prune(now)
            recent = [t for t in self.attempts.get(client, []) if now - t < self.window]
            allowed = len(recent) < self.limit
            if allowed:
                recent.append(now)
            self.attempts[client] = recent
            return allowed

    def first_refusal(self, client: str) -> bool:
        """True once per window per client: log the limit being reached, not every refusal
        (a client hammering the login would otherwise write a log line per request)."""
        now = time.monotonic()
        with self.lock:
            last = self.reported.get(client)
            if last is not None and now - last < self.window:
                return False
            self.reported[client] = now
            return True

    def _prune(self, now: float) -> None:
        for client, times in list(self.attempts.items()):
            if not times or now - times[-1] >= self.window:
                del self.attempts[client]
        for client, at in list(self.reported.items()):
            if now - at >= self.window:
                del self.reported[client]


login_limiter = RateLimiter()  # Malamar's login page and the admin's login share it


def client_address(request) -> str:
    """Who is signing in, for the rate limit and the log."""
    return request.META.get("REMOTE_ADDR") or "unknown"
