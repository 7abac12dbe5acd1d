"""Malamar's runtime configuration.

Priority (later wins): built-in defaults, command-line flags, environment variables.
The `malamar` command copies flags into the environment (unless the variable is already set),
so settings.py, the server and the worker all read one source: the environment.
"""

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

LOG_LEVELS = ("debug", "info", "warn", "error")
LOG_FORMATS = ("text", "json")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Option:
    name: str
    env: str
    flag: str
    default: str
    help: str
    switch: bool = False  # a flag without a value (sets the variable to "1")


OPTIONS = (
    Option("host", "MALAMAR_HOST", "--host", "127.0.0.1", "Bind address"),
    Option("port", "MALAMAR_PORT", "--port", "3456", "Server port"),
    Option("data_dir", "MALAMAR_DATA_DIR", "--data-dir", "~/.malamar", "Data directory"),
    Option("log_level", "MALAMAR_LOG_LEVEL", "--log-level", "info", "Log verbosity"),
    Option("log_format", "MALAMAR_LOG_FORMAT", "--log-format", "text", "Log output format"),
    Option(
        "runner_poll_interval",
        "MALAMAR_RUNNER_POLL_INTERVAL",
        "--runner-poll-interval",
        "1000",
        "Runner poll interval in milliseconds",
    ),
    Option("temp_dir", "MALAMAR_TEMP_DIR", "--temp-dir", "", "Temp directory (system temp)"),
    Option(
        "allowed_hosts",
        "MALAMAR_ALLOWED_HOSTS",
        "--allowed-hosts",
        "",
        "Extra host names to answer to, comma-separated (e.g. box.tail1234.ts.net or .ts.net)",
    ),
    Option(
        "no_auth",
        "MALAMAR_NO_AUTH",
        "--no-auth",
        "",
        "Serve a remote host without a password (you accept the risk, e.g. behind Tailscale ACLs)",
        switch=True,
    ),
    Option(
        "max_json_bytes",
        "MALAMAR_MAX_JSON_BYTES",
        "--max-json-bytes",
        str(10 * 1024 * 1024),
        "Largest request body accepted, except file uploads (JSON and form posts), in bytes",
    ),
    Option(
        "max_upload_bytes",
        "MALAMAR_MAX_UPLOAD_BYTES",
        "--max-upload-bytes",
        str(100 * 1024 * 1024),
        "Largest chat attachment upload accepted (all files of one request), in bytes",
    ),
)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """Only this machine can connect: localhost or a loopback address (127.0.0.0/8, ::1)."""
    import ipaddress

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

    @property
    def is_remote(self) -> bool:
        """Reachable from other machines: a non-loopback bind or an extra allowed host."""
        return self.is_remote_on(self.host)

    def is_remote_on(self, bind: str) -> bool:
        """The same, for a server actually bound to `bind` (which may differ from `host`)."""
        return not is_loopback(bind) or bool(self.allowed_hosts)

    @property
    def database_path(self) -> Path:
        return self.data_dir / "malamar.db"

    def as_rows(self) -> list[tuple[str, str]]:
        return [
            ("host", self.host),
            ("port", str(self.port)),
            ("data_dir", str(self.data_dir)),
            ("database", str(self.database_path)),
            ("log_level", self.log_level),
            ("log_format", self.log_format),
            ("runner_poll_interval", f"{self.runner_poll_interval} ms"),
            ("temp_dir", str(self.temp_dir)),
            ("allowed_hosts", ", ".join(self.allowed_hosts) or "(loopback only)"),
            ("no_auth", "yes" if self.no_auth else "no"),
            ("max_json_bytes", str(self.max_json_bytes)),
            ("max_upload_bytes", str(self.max_upload_bytes)),
        ]


def apply_flags(flags: dict[str, str | None]) -> None:
    """Copy command-line flag values into the environment unless an env var already wins."""
    for option in OPTIONS:
        value = flags.get(option.name)
        if value is not None and option.env not in os.environ:
            os.environ[option.env] = str(value)


def _raw(option: Option) -> str:
    value = os.environ.get(option.env, "").strip()
    return value or option.default


def _positive_int(name: str, raw: str, *, low: int, high: int) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _choice(name: str, raw: str, choices: tuple[str, ...]) -> str:
    value = raw.lower()
    if value == "warning":
        value = "warn"
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return value


def load() -> Config:
    raw = {option.name: _raw(option) for option in OPTIONS}
    temp_dir = raw["temp_dir"] or tempfile.gettempdir()
    return Config(
        host=raw["host"],
        port=_positive_int("port", raw["port"], low=1, high=65535),
        data_dir=Path(raw["data_dir"]).expanduser().resolve(),
        log_level=_choice("log_level", raw["log_level"], LOG_LEVELS),
        log_format=_choice("log_format", raw["log_format"], LOG_FORMATS),
        runner_poll_interval=_positive_int(
            "runner_poll_interval", raw["runner_poll_interval"], low=10, high=3_600_000
        ),
        temp_dir=Path(temp_dir).expanduser().resolve(),
        allowed_hosts=_hosts(raw["allowed_hosts"]),
        no_auth=raw["no_auth"].lower() in ("1", "true", "yes", "on"),
        max_json_bytes=_positive_int("max_json_bytes", raw["max_json_bytes"], low=1024, high=2**40),
        max_upload_bytes=_positive_int(
            "max_upload_bytes", raw["max_upload_bytes"], low=1024, high=2**40
        ),
    )


def _hosts(raw: str) -> tuple[str, ...]:
    hosts = []
    for name in raw.replace(" ", ",").split(","):
        name = name.strip().lower()
        if not name:
            continue
        if "/" in name or (":" in name and not name.startswith("[")):
            raise ConfigError(f"allowed_hosts takes host names (no scheme, port or path): {name!r}")
        hosts.append(name)
    return tuple(dict.fromkeys(hosts))
