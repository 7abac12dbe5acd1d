"""Malamar's runtime configuration: one table of options, every environment variable read here.

Priority (later wins): built-in defaults, command-line flags, environment variables.
The `malamar` command copies flags into the environment (unless the variable is already set),
so settings.py, the server and the worker all read one source: the environment.

Importing this module (or the settings) has no side effect: the data directory and the secret
key are created when a process starts (`ensure_data_dir`) or first needs the key (`secret_key`).
"""

import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

LOG_LEVELS = ("debug", "info", "warn", "error")
LOG_FORMATS = ("text", "json")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")
SEED_MARKER_NAME = ".seed-sample-workspace"
SECRET_KEY_NAME = "secret_key"
# A worker's default capacity when several share PostgreSQL (each run is a few hundred MB).
POSTGRES_CAPACITY = 4


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Option:
    name: str
    env: str
    flag: str | None  # None: environment variable only
    kind: str  # text | int | float | bool | choice | path | hosts
    default: str
    help: str
    choices: tuple[str, ...] = ()
    low: float = 0
    high: float = 0
    secret: bool = False  # never printed

    @property
    def switch(self) -> bool:
        """A boolean flag takes no value (`--no-auth` sets the variable to "1")."""
        return self.kind == "bool"

    @property
    def label(self) -> str:
        return f"{self.env} ({self.flag})" if self.flag else self.env


OPTIONS = (
    Option("host", "MALAMAR_HOST", "--host", "text", "127.0.0.1", "Bind address"),
    Option("port", "MALAMAR_PORT", "--port", "int", "3456", "Server port", low=1, high=65535),
    Option("data_dir", "MALAMAR_DATA_DIR", "--data-dir", "path", "~/.malamar", "Data directory"),
    Option(
        "log_level",
        "MALAMAR_LOG_LEVEL",
        "--log-level",
        "choice",
        "info",
        "Log verbosity",
        choices=LOG_LEVELS,
    ),
    Option(
        "log_format",
        "MALAMAR_LOG_FORMAT",
        "--log-format",
        "choice",
        "text",
        "Log output format",
        choices=LOG_FORMATS,
    ),
    Option(
        "runner_poll_interval",
        "MALAMAR_RUNNER_POLL_INTERVAL",
        "--runner-poll-interval",
        "int",
        "1000",
        "Runner poll interval in milliseconds",
        low=10,
        high=3_600_000,
    ),
    Option(
        "temp_dir", "MALAMAR_TEMP_DIR", "--temp-dir", "path", "", "Temp directory (system temp)"
    ),
    Option(
        "allowed_hosts",
        "MALAMAR_ALLOWED_HOSTS",
        "--allowed-hosts",
        "hosts",
        "",
        "Extra host names to answer to, comma-separated (e.g. box.tail1234.ts.net or .ts.net)",
    ),
    Option(
        "no_auth",
        "MALAMAR_NO_AUTH",
        "--no-auth",
        "bool",
        "0",
        "Serve a remote host without a password (you accept the risk, e.g. behind Tailscale ACLs)",
    ),
    Option(
        "max_json_bytes",
        "MALAMAR_MAX_JSON_BYTES",
        "--max-json-bytes",
        "int",
        str(10 * 1024 * 1024),
        "Largest request body accepted, except file uploads (JSON and form posts), in bytes",
        low=1024,
        high=2**40,
    ),
    Option(
        "max_upload_bytes",
        "MALAMAR_MAX_UPLOAD_BYTES",
        "--max-upload-bytes",
        "int",
        str(100 * 1024 * 1024),
        "Largest chat attachment upload accepted (all files of one request), in bytes",
        low=1024,
        high=2**40,
    ),
    Option(
        "public_url",
        "MALAMAR_PUBLIC_URL",
        "--public-url",
        "text",
        "",
        "Address used in links sent out (emails, webhooks); default http://HOST:PORT",
    ),
    Option(
        "trust_proxy",
        "MALAMAR_TRUST_PROXY",
        "--trust-proxy",
        "bool",
        "0",
        "Behind a TLS proxy (e.g. tailscale serve): trust X-Forwarded-Proto, Secure cookies",
    ),
    Option("debug", "MALAMAR_DEBUG", "--debug", "bool", "0", "Django debug mode (development)"),
    Option(
        "secret_key",
        "MALAMAR_SECRET_KEY",
        None,
        "text",
        "",
        "Signing key (default: created once in the data directory)",
        secret=True,
    ),
    Option(
        "event_relay_poll",
        "MALAMAR_EVENT_RELAY_POLL",
        None,
        "float",
        "1",
        "Seconds between the server's looks for new events when no commit woke it (SQLite)",
        low=0.001,
        high=60,
    ),
    Option(
        "mailgun_base_url",
        "MALAMAR_MAILGUN_BASE_URL",
        None,
        "text",
        "",
        "Another Mailgun host (tests, a proxy); default from the region in Settings",
    ),
    Option(
        "password_stdin",
        "MALAMAR_PASSWORD_STDIN",
        None,
        "bool",
        "0",
        "`set-password` reads the password from standard input (no prompt)",
    ),
    Option(
        "database_url",
        "DATABASE_URL",
        None,
        "url",
        "",
        "PostgreSQL for several workers and servers, postgres://USER:PASS@HOST:PORT/NAME"
        " (default: SQLite in the data directory)",
        choices=("postgres", "postgresql"),
        secret=True,
    ),
    Option(
        "redis_url",
        "REDIS_URL",
        None,
        "url",
        "",
        "Redis for live events across several servers, redis://HOST:PORT/DB (default: none)",
        choices=("redis", "rediss", "unix"),
        secret=True,
    ),
    Option(
        "worker_capacity",
        "MALAMAR_WORKER_CAPACITY",
        None,
        "int",
        "0",
        "Most runs (task passes and chat replies) one worker runs at once; 0: no limit with"
        f" SQLite (one worker owns the machine), {POSTGRES_CAPACITY} with PostgreSQL",
        low=0,
        high=10_000,
    ),
    Option(
        "worker_heartbeat",
        "MALAMAR_WORKER_HEARTBEAT",
        None,
        "float",
        "5",
        "Seconds between a worker's heartbeats (and its look for workers that stopped beating)",
        low=0.05,
        high=300,
    ),
    Option(
        "worker_stale_after",
        "MALAMAR_WORKER_STALE_AFTER",
        None,
        "float",
        "30",
        "Seconds without a heartbeat after which another worker takes a worker's runs over",
        low=0.2,
        high=3600,
    ),
    Option("testing", "MALAMAR_TESTING", None, "bool", "0", "Test runs: answer the test client"),
)
OPTIONS_BY_NAME = {option.name: option for option in OPTIONS}
# Redis (live events across servers, core.fanout): channels-redis waits for a message with a
# blocking pop of 5 s (RedisChannelLayer.brpop_timeout). A socket timeout no longer than that
# (redis-py 8's default is 5 s) ends idle waits in a timeout error instead of "nothing came";
# reads outlast the pop, a Redis that does not answer a connection is given up on sooner.
REDIS_SOCKET_TIMEOUT = 15.0
REDIS_CONNECT_TIMEOUT = 5.0
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")
_from_flags: set[str] = set()  # variables this process set from its command-line flags


def is_loopback(host: str) -> bool:
    """Only this machine can connect: localhost or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # another name; wildcards ("0.0.0.0", "::") are addresses: all remote
    if address.version == 6 and address.ipv4_mapped:  # ::ffff:127.0.0.1
        address = address.ipv4_mapped
    return address.is_loopback


@dataclass(frozen=True)
class Config:
    host: str
    port: int
    data_dir: Path
    log_level: str
    log_format: str
    runner_poll_interval: int
    temp_dir: Path
    allowed_hosts: tuple[str, ...] = ()
    no_auth: bool = False
    max_json_bytes: int = 10 * 1024 * 1024
    max_upload_bytes: int = 100 * 1024 * 1024
    public_url: str = ""
    trust_proxy: bool = False
    debug: bool = False
    event_relay_poll: float = 1.0
    database_url: str = ""
    redis_url: str = ""
    worker_capacity: int = 0
    worker_heartbeat: float = 5.0
    worker_stale_after: float = 30.0
    testing: bool = False

    @property
    def is_remote(self) -> bool:
        """Reachable from other machines: a non-loopback bind or an extra allowed host."""
        return self.is_remote_on(self.host)

    def is_remote_on(self, bind: str) -> bool:
        """The same, for a server actually bound to `bind` (which may differ from `host`)."""
        return not is_loopback(bind) or bool(self.allowed_hosts)

    @property
    def uses_postgres(self) -> bool:
        return bool(self.database_url)

    @property
    def capacity(self) -> int:
        """Most runs a worker runs at once (0: no limit)."""
        if self.worker_capacity or not self.uses_postgres:
            return self.worker_capacity
        return POSTGRES_CAPACITY

    @property
    def database_path(self) -> Path:
        return self.data_dir / "malamar.db"

    @property
    def seed_marker(self) -> Path:
        return self.data_dir / SEED_MARKER_NAME


def apply_flags(flags: dict[str, str | None]) -> None:
    """Copy command-line flag values into the environment unless an env var already wins."""
    for option in OPTIONS:
        value = flags.get(option.name)
        if value is not None and option.flag and not _env(option):
            os.environ[option.env] = str(value)
            _from_flags.add(option.env)


def _env(option: Option) -> str:
    return os.environ.get(option.env, "").strip()


def source(option: Option) -> str:
    """Where the option's value comes from: flag, env or default."""
    if not _env(option):
        return "default"
    return "flag" if option.env in _from_flags else "env"


def parse_bool(option: Option, raw: str) -> bool:
    word = raw.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    accepted = "/".join(TRUE_WORDS) + " or " + "/".join(FALSE_WORDS)
    raise ConfigError(f"{option.label} must be {accepted}, got {raw!r}")


def _number(option: Option, raw: str) -> int | float:
    cast = int if option.kind == "int" else float
    try:
        value = cast(raw)
    except ValueError:
        kind = "a whole number" if option.kind == "int" else "a number"
        raise ConfigError(f"{option.label} must be {kind}, got {raw!r}") from None
    if not option.low <= value <= option.high:
        raise ConfigError(
            f"{option.label} must be between {option.low:g} and {option.high:g}, got {raw!r}"
        )
    return value


def _choice(option: Option, raw: str) -> str:
    value = raw.lower()
    if value == "warning":
        value = "warn"
    if value not in option.choices:
        raise ConfigError(f"{option.label} must be one of {', '.join(option.choices)}, got {raw!r}")
    return value


def _hosts(option: Option, raw: str) -> tuple[str, ...]:
    hosts = []
    for name in raw.replace(" ", ",").split(","):
        name = name.strip().lower()
        if not name:
            continue
        if "/" in name or (":" in name and not name.startswith("[")):
            raise ConfigError(
                f"{option.label} takes host names (no scheme, port or path): {name!r}"
            )
        hosts.append(name)
    return tuple(dict.fromkeys(hosts))


def _path(option: Option, raw: str) -> Path:
    if not raw:  # the temp dir's default: the system's
        raw = tempfile.gettempdir()
    return Path(raw).expanduser().resolve()


def _url(option: Option, raw: str) -> str:
    """Empty, or an address whose scheme is one of the option's (never echoed: it may hold a
    password)."""
    if not raw:
        return ""
    scheme = raw.split("://", 1)[0].lower() if "://" in raw else ""
    if scheme not in option.choices:
        allowed = ", ".join(f"{c}://" for c in option.choices)
        raise ConfigError(f"{option.env} must start with one of {allowed}")
    return raw


PARSERS = {
    "text": lambda option, raw: raw,
    "url": _url,
    "int": _number,
    "float": _number,
    "bool": parse_bool,
    "choice": _choice,
    "path": _path,
    "hosts": _hosts,
}


def read(name: str):
    """One option's value now (environment, else default), parsed by its type."""
    option = OPTIONS_BY_NAME[name]
    return PARSERS[option.kind](option, _env(option) or option.default)


def load() -> Config:
    """Every option checked (ConfigError for the first invalid one); the Config holds all but
    the secret and those read where they are used (they may change in tests)."""
    parsed = {option.name: read(option.name) for option in OPTIONS}
    values = {name: parsed[name] for name in Config.__dataclass_fields__}
    if not values["public_url"]:
        values["public_url"] = f"http://{values['host']}:{values['port']}"
    values["public_url"] = values["public_url"].rstrip("/")
    return Config(**values)


def shown_value(option: Option, config: Config) -> str:
    if option.secret:
        if option.name == "secret_key":
            return "(set)" if _env(option) else "(the data directory's secret_key file)"
        return "(set)" if _env(option) else "(none)"
    value = getattr(config, option.name, None)
    if value is None:
        value = read(option.name)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, tuple):
        return ", ".join(value) or "(none)"
    if option.name == "runner_poll_interval":
        return f"{value} ms"
    return str(value) if value != "" else "(none)"


def report(config: Config) -> str:
    """`malamar config`: every option, its value, where the value comes from, its variable."""
    rows = [(o.name, shown_value(o, config), source(o), o.env) for o in OPTIONS]
    database = "PostgreSQL (DATABASE_URL)" if config.uses_postgres else str(config.database_path)
    rows.insert(3, ("database", database, "data_dir", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["Malamar configuration (defaults < flags < environment variables)", ""]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  " + "  ".join([*cells, row[3]]).rstrip())
    return "\n".join(lines)


def channel_layers(redis_url: str) -> dict:
    """Django Channels' layers for `redis_url`: the one that carries live events to every server.
    A batch of events is one message; the capacity is far above what a listener can fall behind
    by, and whatever it still misses it reads from the storage."""
    host = {
        "address": redis_url,
        "socket_timeout": REDIS_SOCKET_TIMEOUT,
        "socket_connect_timeout": REDIS_CONNECT_TIMEOUT,
        "socket_keepalive": True,
    }
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [host], "capacity": 10_000, "expiry": 60},
        }
    }


def ensure_data_dir(config: Config | None = None) -> None:
    """Create the data directory where a process starts (the commands that migrate, serve or run
    the worker, and the ASGI application), before anything opens the database. "First launch"
    means "no database yet" (a new or empty data directory): the marker file lets the process
    that migrates first seed the sample workspace (guarded again by a row in the database)."""
    try:
        config = config or load()
    except ConfigError:
        return  # the settings say what is wrong
    try:
        first_launch = not config.database_path.exists()
        config.data_dir.mkdir(parents=True, exist_ok=True)
        if first_launch:
            config.seed_marker.touch()
    except OSError:
        pass  # `doctor` reports an unusable data dir; everything else fails with a clear error


def secret_key(data_dir: Path) -> str:
    """MALAMAR_SECRET_KEY, else a per-installation secret created once in the data dir (never
    committed, never logged)."""
    if read("secret_key"):
        return read("secret_key")
    path = data_dir / SECRET_KEY_NAME
    try:
        if not path.exists():
            from django.core.management.utils import get_random_secret_key

            data_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(get_random_secret_key())
    except FileExistsError:
        pass  # another process created it between our check and open
    except OSError:
        return "unusable-data-dir"  # only `doctor`/`config` can run; they say what is wrong
    return path.read_text().strip()
