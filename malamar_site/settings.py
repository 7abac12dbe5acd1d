"""Malamar's Django settings: one env-driven file with defaults that just run.

Every MALAMAR_* option comes from core.config's one table (flags copied into the environment,
env wins). Everything else has a safe default. Importing this module creates nothing.
"""

from importlib.util import find_spec
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import SimpleLazyObject

from core import config as malamar_config

BASE_DIR = Path(__file__).resolve().parent.parent
try:
    CONFIG = malamar_config.load()
except malamar_config.ConfigError as exc:
    raise ImproperlyConfigured(str(exc)) from None

DATA_DIR = CONFIG.data_dir
SEED_MARKER = CONFIG.seed_marker  # see core.config.ensure_data_dir
# Read (or created in the data dir) when first used, not when the settings are imported.
SECRET_KEY = SimpleLazyObject(lambda: malamar_config.secret_key(DATA_DIR))

DEBUG = CONFIG.debug

LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]
ALLOWED_HOSTS = list(LOOPBACK_HOSTS)
if CONFIG.host not in ("0.0.0.0", "::", "") and CONFIG.host not in ALLOWED_HOSTS:
    ALLOWED_HOSTS.append(CONFIG.host)
ALLOWED_HOSTS += [host for host in CONFIG.allowed_hosts if host not in ALLOWED_HOSTS]
if CONFIG.testing:
    ALLOWED_HOSTS.append("testserver")


def _origins(host: str) -> list[str]:
    name = f"*{host}" if host.startswith(".") else host  # ".ts.net" → any *.ts.net
    return [
        f"{scheme}://{name}{port}"
        for scheme in ("https", "http")
        for port in ("", f":{CONFIG.port}")
    ]


CSRF_TRUSTED_ORIGINS = [origin for host in ALLOWED_HOSTS for origin in _origins(host)]
PUBLIC_URL = CONFIG.public_url

# /api/docs: Swagger UI from ninja's own templates and static files, not from a CDN. Found here,
# not by listing "ninja" as an app, which would import it and pydantic (~11 MB) into the worker.
NINJA_DIR = Path(find_spec("ninja").submodule_search_locations[0])

INSTALLED_APPS = [
    # first: its `runserver` (daphne's, plus the password refusal) wins over Django's. Not the
    # "daphne" app: it imports Twisted (~17 MB) into every process, the worker's too.
    "core",
    "core.admin_site.MalamarAdminConfig",  # django.contrib.admin, its login rate-limited
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "django_eventstream",
    "workspaces",
    "agents",
    "tasks",
    "chats",
    "runner",
    "notifications",
]

MIDDLEWARE = [
    "core.middleware.RequestSizeMiddleware",
    "core.middleware.NulCharacterMiddleware",
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
    "core.middleware.LivePositionMiddleware",
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
        "DIRS": [BASE_DIR / "malamar_site" / "templates", NINJA_DIR / "templates"],
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
if CONFIG.uses_postgres:
    # Several workers and servers share one PostgreSQL (docs/scale-out.md). Connections are
    # kept for a minute and checked before reuse, so a restarted database costs one error-free
    # reconnect rather than a failed request.
    import dj_database_url

    DATABASES["default"] = dj_database_url.parse(
        CONFIG.database_url, conn_max_age=60, conn_health_checks=True
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "malamar_site" / "static", NINJA_DIR / "static"]
WHITENOISE_USE_FINDERS = True  # serve straight from the app folders: no collectstatic step
WHITENOISE_AUTOREFRESH = DEBUG

SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_AGE = 30 * 24 * 3600
# Behind a TLS-terminating proxy (e.g. `tailscale serve`): trust its X-Forwarded-Proto only
# when told to, then cookies are marked Secure for HTTPS.
if CONFIG.trust_proxy:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"

# Server-sent events: django-eventstream's database storage gives Last-Event-ID replay.
EVENTSTREAM_STORAGE_CLASS = "django_eventstream.storage.DjangoModelStorage"
EVENTS_CHANNEL = "malamar"
EVENT_RELAY_POLL_SECONDS = CONFIG.event_relay_poll
# On PostgreSQL ids are taken at INSERT and commits land in any order: the relay waits this long
# for a skipped id's row to commit before giving up on it (a rolled-back transaction).
EVENT_RELAY_GAP_SECONDS = 60
if CONFIG.redis_url:
    # Several servers: the relay sends each stored event through this layer to every server's
    # listener (core.fanout).
    CHANNEL_LAYERS = malamar_config.channel_layers(CONFIG.redis_url)

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
