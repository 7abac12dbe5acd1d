"""Malamar's Django settings: one env-driven file with defaults that just run.

Runtime options (host, port, data dir, logging, poll interval, temp dir) come from
core.config (flags copied into MALAMAR_* env vars, env wins). Everything else has a safe default.
"""

import os
from pathlib import Path

from core import config as malamar_config

BASE_DIR = Path(__file__).resolve().parent.parent
CONFIG = malamar_config.load()

DATA_DIR = CONFIG.data_dir
# "First launch" means "no database yet" (a new or empty data directory), decided before anything
# creates the database; the marker file lets the process that migrates first seed the sample
# workspace (guarded again by a row in the database).
FIRST_LAUNCH = not CONFIG.database_path.exists()
SEED_MARKER = DATA_DIR / ".seed-sample-workspace"
try:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    if FIRST_LAUNCH:
        SEED_MARKER.touch()
except OSError:
    pass  # `doctor` reports an unusable data dir; everything else fails with a clear error


def _secret_key() -> str:
    """A per-installation secret, created once in the data dir (never committed, never logged)."""
    if os.environ.get("MALAMAR_SECRET_KEY"):
        return os.environ["MALAMAR_SECRET_KEY"]
    path = DATA_DIR / "secret_key"
    if not path.exists():
        from django.core.management.utils import get_random_secret_key

        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(get_random_secret_key())
    return path.read_text().strip()


try:
    SECRET_KEY = _secret_key()
except FileExistsError:  # another process created it between our check and open
    SECRET_KEY = (DATA_DIR / "secret_key").read_text().strip()
except OSError:
    SECRET_KEY = "unusable-data-dir"  # only `doctor`/`config` can run; they say what is wrong

DEBUG = os.environ.get("MALAMAR_DEBUG") == "1"

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]
ALLOWED_HOSTS = list(LOOPBACK_HOSTS)
if CONFIG.host not in ("0.0.0.0", "::", "") and CONFIG.host not in ALLOWED_HOSTS:
    ALLOWED_HOSTS.append(CONFIG.host)
ALLOWED_HOSTS += [host for host in CONFIG.allowed_hosts if host not in ALLOWED_HOSTS]
if os.environ.get("MALAMAR_TESTING") == "1":
    ALLOWED_HOSTS.append("testserver")


def _origins(host: str) -> list[str]:
    name = f"*{host}" if host.startswith(".") else host  # ".ts.net" → any *.ts.net
    return [
        f"{scheme}://{name}{port}"
        for scheme in ("https", "http")
        for port in ("", f":{CONFIG.port}")
    ]


CSRF_TRUSTED_ORIGINS = [origin for host in ALLOWED_HOSTS for origin in _origins(host)]
PUBLIC_URL = os.environ.get("MALAMAR_PUBLIC_URL", f"http://{CONFIG.host}:{CONFIG.port}").rstrip("/")

INSTALLED_APPS = [
    "core",  # first: its `runserver` (daphne's, plus the password refusal) wins over daphne's
    "daphne",
    "core.admin_site.MalamarAdminConfig",  # django.contrib.admin, its login rate-limited
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "django_eventstream",
    "ninja",  # /api/docs: Swagger UI from ninja's static files, not from a CDN
    "workspaces",
    "agents",
    "tasks",
    "chats",
    "runner",
    "notifications",
]

MIDDLEWARE = [
    "core.middleware.RequestSizeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "core.middleware.ApiGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "core.middleware.LoginRequiredMiddleware",
    "core.middleware.SecurityHeadersMiddleware",
]

# Request bodies (core.limits): file uploads up to MALAMAR_MAX_UPLOAD_BYTES (streamed to disk
# past 2.5 MB), everything else up to MALAMAR_MAX_JSON_BYTES.
DATA_UPLOAD_MAX_MEMORY_SIZE = CONFIG.max_json_bytes

ROOT_URLCONF = "malamar_site.urls"
ASGI_APPLICATION = "malamar_site.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "malamar_site" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "core.context_processors.access",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": CONFIG.database_path,
        "OPTIONS": {
            # IMMEDIATE: two processes (server + worker) write; deferred transactions would fail
            # with "database is locked" when they upgrade to a write lock.
            "transaction_mode": "IMMEDIATE",
            "timeout": 5,
            "init_command": (
                "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA busy_timeout=5000;"
            ),
        },
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "malamar_site" / "static"]
WHITENOISE_USE_FINDERS = True  # serve straight from the app folders: no collectstatic step
WHITENOISE_AUTOREFRESH = DEBUG

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = 30 * 24 * 3600
# Behind a TLS-terminating proxy (e.g. `tailscale serve`): trust its X-Forwarded-Proto only
# when told to, then cookies are marked Secure for HTTPS.
if os.environ.get("MALAMAR_TRUST_PROXY") == "1":
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"

# Server-sent events: django-eventstream's database storage gives Last-Event-ID replay.
EVENTSTREAM_STORAGE_CLASS = "django_eventstream.storage.DjangoModelStorage"
EVENTS_CHANNEL = "malamar"
EVENT_RELAY_POLL_SECONDS = float(os.environ.get("MALAMAR_EVENT_RELAY_POLL", "0.025"))

_LEVELS = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "error": "ERROR"}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "text": {"()": "core.logging.TextFormatter"},
        "json": {"()": "core.logging.JsonFormatter"},
    },
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": CONFIG.log_format,
            "filters": ["suspicious_requests"],
        }
    },
    "filters": {"suspicious_requests": {"()": "core.logging.SuspiciousRequestFilter"}},
    "root": {"handlers": ["stdout"], "level": _LEVELS[CONFIG.log_level]},
    "loggers": {
        "django_eventstream": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "asyncio": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
    },
}
