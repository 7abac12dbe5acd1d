"""The production shape's files (compose.yaml, Dockerfile, deploy/, docs/scale-out.md) against
the code: services and settings present, every variable and command they name real, no secret
written in. Docker does not run here: the files are parsed, not started. A renamed option or
command in core/config.py, the CLI or the management commands fails this test until the docs
and compose follow."""

import re
from pathlib import Path

import pytest
import yaml
from django.core.management import get_commands, load_command_class

from core.config import OPTIONS, OPTIONS_BY_NAME, read
from malamar_site.cli import COMMANDS, DELEGATED

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "compose.yaml"
DOCS = ROOT / "docs" / "scale-out.md"
NGINX = ROOT / "deploy" / "nginx.conf"
ENV_EXAMPLE = ROOT / "deploy" / "env.example"
DOCKERFILE = ROOT / "Dockerfile"
ENTRYPOINT = ROOT / "deploy" / "entrypoint.sh"
README = ROOT / "README.md"

CONFIG_ENV = {option.env for option in OPTIONS}
SECRET_ENV = {option.env for option in OPTIONS if option.secret}
MALAMAR_SERVICES = ("migrate", "server", "worker")
# Read by the images of PostgreSQL and the deployment files, not by Malamar.
DEPLOYMENT_ENV = {"POSTGRES_USER", "POSTGRES_DB", "POSTGRES_PASSWORD", "PROXY_PORT", "SHARED_DIR"}
# The multi-worker options the docs describe; until a worker has a capacity (the multi-worker
# change), these names may be missing from core/config.py. Afterwards they must all exist.
PENDING_WORKER_ENV = {
    "MALAMAR_WORKER_CAPACITY",
    "MALAMAR_WORKER_HEARTBEAT",
    "MALAMAR_WORKER_STALE_AFTER",
}
MALAMAR_VARIABLE = re.compile(r"\bMALAMAR_[A-Z0-9_]+\b")
INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)")


def runworker_flags() -> set[str]:
    command = load_command_class(get_commands()["runworker"], "runworker")
    parser = command.create_parser("manage.py", "runworker")
    return set(parser._option_string_actions)


def workers_have_capacity() -> bool:
    return "--capacity" in runworker_flags() or "worker_capacity" in OPTIONS_BY_NAME


def known_env() -> set[str]:
    return CONFIG_ENV if workers_have_capacity() else CONFIG_ENV | PENDING_WORKER_ENV


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def environment(service: dict) -> dict:
    env = service.get("environment") or {}
    return {name: str(value) for name, value in env.items()}


def scale_out_section() -> str:
    text = README.read_text()
    start = text.index("## Scale out")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_compose_has_the_production_shape(compose):
    services = compose["services"]
    assert set(services) >= {"postgres", "redis", "migrate", "server", "worker", "proxy"}
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["redis"]["image"].startswith("redis:")
    assert services["server"]["deploy"]["replicas"] == 2
    assert services["worker"]["deploy"]["replicas"] == 3
    for name in ("postgres", "redis", "server", "proxy"):
        assert services[name]["healthcheck"]["test"], f"{name} has no healthcheck"
    for name in ("server", "worker"):
        needs = services[name]["depends_on"]
        assert needs["migrate"]["condition"] == "service_completed_successfully"
    assert services["proxy"]["volumes"] == ["./deploy/nginx.conf:/etc/nginx/conf.d/default.conf:ro"]


def test_compose_gives_every_malamar_process_the_database_redis_and_one_secret_key(compose):
    envs = [environment(compose["services"][name]) for name in MALAMAR_SERVICES]
    for env in envs:
        assert env["DATABASE_URL"].startswith("postgres://")
        assert env["REDIS_URL"].startswith("redis://")
        assert env["MALAMAR_SECRET_KEY"].startswith("${MALAMAR_SECRET_KEY")
    assert len({env["MALAMAR_SECRET_KEY"] for env in envs}) == 1


def test_compose_names_only_real_variables_and_writes_no_secret(compose):
    for name, service in compose["services"].items():
        for variable, value in environment(service).items():
            if name in MALAMAR_SERVICES:
                assert variable in known_env(), f"{name}: {variable} is not in core/config.py"
            else:
                assert variable in DEPLOYMENT_ENV, f"{name}: unexpected {variable}"
            if variable in SECRET_ENV or "PASSWORD" in variable or "SECRET" in variable:
                assert not written_secret(value), f"{name}: {variable} is written in compose.yaml"
    for service in MALAMAR_SERVICES:
        url = environment(compose["services"][service])["DATABASE_URL"]
        assert ":${POSTGRES_PASSWORD:?" in url, "the database password must come from .env"


def written_secret(value: str) -> bool:
    """A literal secret: anything but an interpolation, or a URL with a literal password."""
    if "://" not in value:
        return not value.startswith("${")
    userinfo = value.split("://", 1)[1].split("@", 1)[0] if "@" in value else ""
    password = userinfo.split(":", 1)[1] if ":" in userinfo else ""
    return bool(password) and not password.startswith("${")


def test_the_secret_check_spots_literals():
    assert written_secret("hunter2")
    assert written_secret("postgres://malamar:hunter2@db/malamar")
    assert not written_secret("${MALAMAR_SECRET_KEY:?set it}")
    assert not written_secret("postgres://malamar:${POSTGRES_PASSWORD}@db/malamar")
    assert not written_secret("redis://redis:6379/0")


def test_every_interpolated_variable_is_in_the_env_example():
    example = {
        line.split("=", 1)[0]
        for line in ENV_EXAMPLE.read_text().splitlines()
        if line and not line.startswith("#")
    }
    used = set(INTERPOLATION.findall(COMPOSE.read_text()))
    assert used <= example, (
        f"compose.yaml uses variables deploy/env.example lacks: {used - example}"
    )
    assert example <= known_env() | DEPLOYMENT_ENV
    assert all(
        line.endswith("=") or not any(word in line for word in ("PASSWORD=", "SECRET_KEY="))
        for line in ENV_EXAMPLE.read_text().splitlines()
    ), "deploy/env.example holds a secret value"


def test_compose_commands_exist(compose):
    services = compose["services"]
    assert services["worker"]["command"][1:] == ["/app/manage.py", "runworker"]
    server = services["server"]["command"]
    assert server[:3] == ["python", "-m", "malamar_site.server_process"]
    assert server[-1] == "malamar_site.asgi:application"
    migrate = " ".join(services["migrate"]["command"])
    for command in re.findall(r"manage\.py (\w+)", migrate):
        assert command in get_commands(), command
    assert "set_password --stdin" in migrate
    assert services["migrate"]["secrets"] == ["malamar_password"]


def test_nginx_streams_events_unbuffered_with_a_long_timeout():
    text = NGINX.read_text()
    events = text[text.index("location /api/events") :]
    events = events[: events.index("}")]
    assert "proxy_buffering off;" in events
    assert "X-Accel-Buffering no" in events
    timeout = re.search(r"proxy_read_timeout (\d+)([smh]?);", events)
    seconds = int(timeout.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[timeout.group(2)]
    assert seconds >= 3600
    body = re.search(r"client_max_body_size (\d+)m;", text)
    assert int(body.group(1)) * 1024 * 1024 >= read("max_upload_bytes")
    assert "server server:3456;" in text


def test_the_image_runs_malamar_as_an_unprivileged_user():
    text = DOCKERFILE.read_text()
    assert text.splitlines()[
        [line.startswith("FROM") for line in text.splitlines()].index(True)
    ] == ("FROM python:3.11-slim")
    assert "pip install --no-cache-dir /app" in text
    assert re.search(r"^USER malamar$", text, re.MULTILINE)
    assert "git" in text  # snapshots and branch per task
    assert ENTRYPOINT.stat().st_mode & 0o111


def test_every_variable_the_docs_name_is_real():
    """docs/scale-out.md, the README's section, compose and deploy/: every MALAMAR_* variable
    exists in core/config.py; the docs' table names only real variables."""
    texts = {
        "docs/scale-out.md": DOCS.read_text(),
        "README.md (Scale out)": scale_out_section(),
        "compose.yaml": COMPOSE.read_text(),
        "Dockerfile": DOCKERFILE.read_text(),
        "deploy/": ENTRYPOINT.read_text() + ENV_EXAMPLE.read_text() + NGINX.read_text(),
    }
    for where, text in texts.items():
        unknown = set(MALAMAR_VARIABLE.findall(text)) - known_env()
        assert not unknown, f"{where} names variables core/config.py lacks: {unknown}"
    table = DOCS.read_text().split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    for row in re.findall(r"^\| `([^|]+)` \|", table, re.MULTILINE):
        for variable in re.findall(r"[A-Z][A-Z0-9_]+", row):
            assert variable in known_env(), f"the docs' table names {variable}"


def test_every_command_the_docs_name_exists():
    code = "\n".join(re.findall(r"```sh\n(.*?)```", DOCS.read_text(), re.DOTALL))
    code += "\n" + "\n".join(re.findall(r"`([^`\n]+)`", DOCS.read_text()))
    malamar = set(re.findall(r"(?:^|[\s(])malamar ([a-z][\w-]*)", code, re.MULTILINE))
    assert malamar, "no malamar command found in the docs"
    assert malamar <= set(COMMANDS) | set(DELEGATED), malamar - set(COMMANDS) - set(DELEGATED)
    managed = set(re.findall(r"manage\.py (\w+)", code))
    assert managed and managed <= set(get_commands()), managed - set(get_commands())
    flags = set(re.findall(r"runworker (--[\w-]+)", code))
    if workers_have_capacity():
        assert flags <= runworker_flags(), flags - runworker_flags()
