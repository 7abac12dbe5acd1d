"""Configuration precedence, the `malamar` command, `config`, `doctor` and first launch."""

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core import config
from core.ids import ALPHABET, ID_LENGTH, new_id
from tests import databases
from tests.live import ROOT, blank_database, django_script, manage, process_env, wait_until
from tests.stack import data_dir_from

# Real commands (migrate, doctor, malamar) on data dirs of their own: ordered first.
pytestmark = pytest.mark.live

OPTION_ENVS = [o.env for o in config.OPTIONS]


@pytest.fixture
def clean_env(monkeypatch):
    for env in OPTION_ENVS:
        monkeypatch.setenv(env, "")  # records the original value so it is restored afterwards
        monkeypatch.delenv(env)
    return monkeypatch


def test_defaults(clean_env, tmp_path):
    cfg = config.load()
    assert (cfg.host, cfg.port, cfg.log_level, cfg.log_format) == (
        "127.0.0.1",
        3456,
        "info",
        "text",
    )
    assert cfg.runner_poll_interval == 1000
    assert str(cfg.data_dir).endswith(".malamar")
    assert cfg.database_path.name == "malamar.db"


def test_flags_apply_and_env_overrides_flags(clean_env):
    clean_env.setenv("MALAMAR_PORT", "9000")
    config.apply_flags({"port": "8080", "log_level": "debug", "host": None})
    cfg = config.load()
    assert cfg.port == 9000  # env wins over --port
    assert cfg.log_level == "debug"  # flag used when no env
    assert cfg.host == "127.0.0.1"  # default when neither


@pytest.mark.parametrize(
    "env,value",
    [
        ("MALAMAR_PORT", "http"),
        ("MALAMAR_PORT", "70000"),
        ("MALAMAR_LOG_LEVEL", "loud"),
        ("MALAMAR_LOG_FORMAT", "xml"),
        ("MALAMAR_RUNNER_POLL_INTERVAL", "0"),
        ("MALAMAR_WORKER_CAPACITY", "-1"),
        ("MALAMAR_WORKER_HEARTBEAT", "0"),
        ("MALAMAR_WORKER_STALE_AFTER", "soon"),
    ],
)
def test_invalid_values_are_clear_errors(clean_env, env, value):
    clean_env.setenv(env, value)
    with pytest.raises(config.ConfigError) as err:
        config.load()
    assert env in str(err.value) and value in str(err.value)


@pytest.mark.parametrize(
    "env,value,allowed",
    [
        ("DATABASE_URL", "mysql://me:hunter2@db/malamar", "postgres://, postgresql://"),
        ("DATABASE_URL", "me:hunter2@db/malamar", "postgres://, postgresql://"),
        ("REDIS_URL", "http://:hunter2@cache:6379/0", "redis://, rediss://, unix://"),
    ],
)
def test_a_url_with_a_wrong_scheme_names_the_schemes_and_hides_the_password(
    clean_env, env, value, allowed
):
    clean_env.setenv(env, value)
    with pytest.raises(config.ConfigError) as err:
        config.load()
    assert str(err.value) == f"{env} must start with one of {allowed}"
    assert "hunter2" not in str(err.value)


def test_worker_capacity_defaults_to_unlimited_on_sqlite_and_bounded_on_postgres(clean_env):
    assert config.load().capacity == 0
    clean_env.setenv("DATABASE_URL", "postgres://me:pw@db/malamar")
    assert config.load().capacity == config.POSTGRES_CAPACITY
    clean_env.setenv("MALAMAR_WORKER_CAPACITY", "2")
    assert config.load().capacity == 2


def run_malamar(*args, data_dir, **env):
    return subprocess.run(
        [sys.executable, "-m", "malamar_site.cli", *args],
        env=process_env(data_dir, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_malamar_config_shows_precedence(tmp_path):
    result = run_malamar(
        "config", "--port", "8080", "--log-format", "json", data_dir=tmp_path, MALAMAR_PORT="9001"
    )
    assert result.returncode == 0, result.stderr
    assert "9001" in result.stdout and "8080" not in result.stdout
    assert "json" in result.stdout
    assert str(tmp_path) in result.stdout


def test_manage_py_config(tmp_path):
    result = manage(tmp_path, "config", MALAMAR_RUNNER_POLL_INTERVAL="250")
    assert result.returncode == 0 and "250 ms" in result.stdout


def test_malamar_version_and_help(tmp_path):
    version = run_malamar("version", data_dir=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("malamar ")
    help_text = run_malamar("help", data_dir=tmp_path).stdout
    for word in ("--port", "--data-dir", "--runner-poll-interval", "doctor", "config"):
        assert word in help_text


def test_malamar_refuses_bad_config(tmp_path):
    result = run_malamar("config", data_dir=tmp_path, MALAMAR_PORT="abc")
    assert result.returncode == 2 and "port" in result.stderr


def test_doctor_healthy_after_migrate(tmp_path):
    assert manage(tmp_path, "migrate", "--no-input").returncode == 0
    empty = tmp_path / "no-clis"
    empty.mkdir()
    result = run_malamar("doctor", data_dir=tmp_path, PATH=str(empty))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "✓ Data directory" in result.stdout
    assert "migrations current" in result.stdout
    assert "✗ Claude Code: Binary not found in PATH (claude)" in result.stdout
    assert "0 of 4 CLIs available" in result.stdout
    assert "✗ Git (snapshots, Changes tab): not found: install the git package" in result.stdout


def test_doctor_reports_git(tmp_path):
    git_dir = Path(shutil.which("git")).parent
    result = run_malamar(
        "doctor", data_dir=tmp_path, PATH=f"{git_dir}:{Path(sys.executable).parent}"
    )
    assert re.search(r"✓ Git \(snapshots, Changes tab\): \d+\.\d+\S* \(/", result.stdout), (
        result.stdout
    )


def _cli_lines(stdout: str) -> dict[str, list[str]]:
    """Each CLI's doctor lines: its own line, then the indented worker line(s)."""
    lines: dict[str, list[str]] = {}
    current = None
    for line in stdout.split("CLI Status", 1)[1].splitlines()[1:]:
        if line[:2] in ("✓ ", "✗ ", "• "):
            current = line[2:].split(":", 1)[0]
            lines[current] = [line]
        elif line.startswith("    ") and current:
            lines[current].append(line.strip())
    return lines


def test_doctor_checks_the_clis_itself_on_a_fresh_data_dir(tmp_path):
    fakes = f"{ROOT / 'tests' / 'fakes' / 'bin'}:{Path(sys.executable).parent}"
    result = run_malamar("doctor", data_dir=tmp_path / "fresh", PATH=fakes)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = _cli_lines(result.stdout)
    assert set(lines) == {"Claude Code", "Codex CLI", "Gemini CLI", "OpenCode"}
    assert lines["Claude Code"][0].startswith("✓ Claude Code: 2.1.197 (Claude Code) (")
    assert lines["Codex CLI"][0].startswith("✓ Codex CLI: codex-cli 0.169.0 (")
    for cli_lines in lines.values():
        assert cli_lines[1].endswith("none yet (it runs when `malamar` starts)"), cli_lines
    assert "4 of 4 CLIs available" in result.stdout


def _line(stdout: str, start: str) -> str:
    return next(line for line in stdout.splitlines() if line[2:].startswith(start))


@pytest.mark.pg
def test_doctor_on_a_fresh_data_dir_says_there_is_no_database_yet(tmp_path):
    """A fresh data dir (SQLite: no file; PostgreSQL: an empty database) is not "54 migrations
    pending" nor "workers unknown": nothing is wrong, `malamar` creates the database. Doctor
    itself creates nothing there (the first `malamar` is still a first launch)."""
    data_dir = tmp_path / "fresh"
    fakes = f"{ROOT / 'tests' / 'fakes' / 'bin'}:{Path(sys.executable).parent}"
    result = run_malamar("doctor", data_dir=data_dir, PATH=fakes)
    assert result.returncode == 0, result.stdout + result.stderr
    database = _line(result.stdout, "Database:")
    assert database.startswith("✓ ") and "the first `malamar` creates" in database, database
    assert "pending" not in database
    assert _line(result.stdout, "Workers:") == (
        "• Workers: none yet (`malamar` or `manage.py runworker` starts one)"
    )
    assert _line(result.stdout, "Access:").startswith("✓ Access: local only (no password)")
    assert not (data_dir / "malamar.db").exists()
    assert manage(data_dir, "migrate", "--no-input").returncode == 0
    sample = django_script(data_dir, SAMPLE).stdout.strip()
    assert sample.startswith("Sample: Code Assistant"), "still a first launch"


HANGS = "#!/bin/sh\nsleep 30\n"
STORE = """
from datetime import timedelta
from django.utils import timezone
from core.settings_store import settings_update
from runner.models import CliHealth
settings_update(changes={{"cli_settings": {{"gemini": {{
    "binary_path": {hangs!r}, "health_timeout_seconds": 5,
}}}}}})
CliHealth.objects.create(
    cli_type="claude", status="unhealthy", error="Not logged in",
    checked_at=timezone.now() - timedelta(hours=3, minutes=5),
)
CliHealth.objects.create(
    cli_type="codex", status="healthy", checked_at=timezone.now() - timedelta(minutes=7)
)
"""


def test_doctor_says_what_the_worker_says_with_the_configured_path_and_time_limit(
    tmp_path, template_db
):
    """Doctor runs the worker's own check (worker.health) and counts a CLI available by
    the worker's rule: a CLI whose stored check failed is not available ("2 of 4 CLIs
    available" next to "worker's check: healthy" no more), one slow to answer is."""
    data_dir_from(template_db, tmp_path)  # migrated (the session's template)
    hangs = tmp_path / "gemini-that-hangs"
    hangs.write_text(HANGS)
    hangs.chmod(0o755)
    django_script(tmp_path, STORE.format(hangs=str(hangs)))
    fakes = f"{ROOT / 'tests' / 'fakes' / 'bin'}:{Path(sys.executable).parent}:/usr/bin:/bin"
    result = run_malamar("doctor", data_dir=tmp_path, PATH=fakes)
    lines = _cli_lines(result.stdout)
    assert lines["Claude Code"] == [
        f"✗ Claude Code: 2.1.197 (Claude Code) ({ROOT / 'tests' / 'fakes' / 'bin' / 'claude'})",
        "worker's check (a test prompt): unhealthy, 3 hours ago: Not logged in",
    ]
    assert lines["Codex CLI"][0].startswith("✓ Codex CLI: codex-cli 0.169.0 (")
    assert lines["Codex CLI"][1] == "worker's check (a test prompt): healthy, 7 minutes ago"
    assert lines["Gemini CLI"][0] == (
        "• Gemini CLI: Slow to answer: `--version` did not answer within 5 s (a busy machine?). "
        f"Malamar keeps using it and checks again in 5 minutes. ({hangs})"
    )
    assert "3 of 4 CLIs available" in result.stdout  # gemini slow: available; claude: not


def test_doctor_fails_on_unusable_data_dir(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    result = run_malamar("doctor", data_dir=blocker)
    assert result.returncode != 0
    assert "✗ Data directory" in result.stdout


@pytest.mark.pg
def test_doctor_reports_pending_migrations(tmp_path):
    assert manage(tmp_path, "migrate", "core", "--no-input").returncode == 0  # partly
    result = manage(tmp_path, "doctor")
    assert "migrations pending" in result.stdout


SAMPLE = """
from workspaces.models import Workspace
for ws in Workspace.objects.all():
    print(ws.title, "|", ",".join(a.name for a in ws.agents.order_by("order")))
"""


def test_first_launch_seeds_sample_workspace_once(tmp_path):
    data_dir = tmp_path / "fresh"  # does not exist yet: first launch
    assert manage(data_dir, "migrate", "--no-input").returncode == 0
    assert manage(data_dir, "migrate", "--no-input").returncode == 0
    out = django_script(data_dir, SAMPLE).stdout.strip().splitlines()
    assert out == ["Sample: Code Assistant | Planner,Implementer,Reviewer,Approver"]


def test_an_existing_but_empty_data_dir_is_a_first_launch(tmp_path):
    data_dir = tmp_path / "made-by-hand"
    data_dir.mkdir()  # e.g. `mkdir ~/.malamar` before the first run: still no database
    assert manage(data_dir, "migrate", "--no-input").returncode == 0
    out = django_script(data_dir, SAMPLE).stdout.strip().splitlines()
    assert out == ["Sample: Code Assistant | Planner,Implementer,Reviewer,Approver"]


def test_no_sample_when_the_database_already_existed(tmp_path):
    blank_database(tmp_path)
    assert manage(tmp_path, "migrate", "--no-input").returncode == 0
    assert django_script(tmp_path, SAMPLE).stdout.strip() == ""


@pytest.mark.pg
def test_migrating_one_app_of_a_new_data_dir_first_is_no_error(tmp_path):
    """`manage.py migrate core` on a new data dir: the sample waits for the tables it needs."""
    data_dir = tmp_path / "fresh"
    result = manage(data_dir, "migrate", "core", "--no-input")
    assert result.returncode == 0, result.stderr
    assert manage(data_dir, "migrate", "--no-input").returncode == 0
    assert django_script(data_dir, SAMPLE).stdout.startswith("Sample: Code Assistant")


@databases.postgres_only("a data dir of its own on a shared database")
def test_a_new_data_dir_on_a_database_in_use_is_no_first_launch(tmp_path):
    """Another machine joins a PostgreSQL database already in use (here one whose data came
    from SQLite, so it never had a sample): its new data dir is not a first launch."""
    first = tmp_path / "first"
    blank_database(first)  # the data dir of the SQLite days
    assert manage(first, "migrate", "--no-input").returncode == 0
    django_script(first, "from workspaces.services import workspace_create as c; c(title='Mine')")
    shared = {"DATABASE_URL": databases.url_for(first)}
    second = tmp_path / "second"
    assert manage(second, "migrate", "--no-input", **shared).returncode == 0
    third = tmp_path / "third"  # a machine that only runs a worker
    worker = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runworker"], env=process_env(third, **shared)
    )
    try:
        registered = "SELECT count(*) FROM workers WHERE pid = ?"
        wait_until(
            lambda: databases.query(first, registered, worker.pid) == [(1,)],
            timeout=60,
            what="the worker to start",
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert django_script(second, SAMPLE, **shared).stdout.strip() == "Mine |"


@pytest.mark.pg
def test_sample_not_recreated_after_user_deletes_it(tmp_path):
    data_dir = tmp_path / "fresh"
    manage(data_dir, "migrate", "--no-input")
    django_script(
        data_dir, "from workspaces.models import Workspace; Workspace.objects.all().delete()"
    )
    manage(data_dir, "migrate", "--no-input")
    assert django_script(data_dir, SAMPLE).stdout.strip() == ""


def test_sample_agents_say_when_to_skip_comment_and_review(db):
    from agents.first_launch import SAMPLE_AGENTS

    for _name, instruction in SAMPLE_AGENTS:
        lowered = instruction.lower()
        assert "skip" in lowered and "comment" in lowered and "review" in lowered


def test_json_log_format(tmp_path):
    code = "import logging; logging.getLogger('x').info('hello', extra={'task_id': 't1'})"
    out = django_script(tmp_path, code, MALAMAR_LOG_FORMAT="json").stdout.strip()
    import json

    record = json.loads(out.splitlines()[-1])
    assert record["level"] == "info" and record["message"] == "hello"
    assert record["context"]["task_id"] == "t1"


def test_text_log_format_and_level(tmp_path):
    code = "import logging; log = logging.getLogger('x'); log.info('hidden'); log.warning('shown')"
    out = django_script(tmp_path, code, MALAMAR_LOG_LEVEL="warn").stdout
    assert "hidden" not in out
    assert "[WARN] shown" in out


IMPORT_SETTINGS = "import malamar_site.settings as s; print(s.DEBUG)"


def _python(code: str, data_dir: Path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=process_env(data_dir, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_importing_the_settings_creates_nothing(tmp_path):
    data_dir = tmp_path / "fresh"
    result = _python(IMPORT_SETTINGS, data_dir)
    assert result.returncode == 0, result.stderr
    assert not data_dir.exists()  # no data dir, no secret key, no first-launch marker
    made_by_hand = tmp_path / "empty"
    made_by_hand.mkdir()
    assert _python(IMPORT_SETTINGS, made_by_hand).returncode == 0
    assert list(made_by_hand.iterdir()) == []


def test_the_secret_key_is_created_once_when_first_used(tmp_path):
    code = "import django; django.setup(); from django.conf import settings; "
    code += "print(settings.SECRET_KEY)"
    first, second = _python(code, tmp_path), _python(code, tmp_path)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout and len(first.stdout.strip()) >= 50
    assert first.stdout.strip() == (tmp_path / "secret_key").read_text().strip()
    assert _python(code, tmp_path, MALAMAR_SECRET_KEY="from-env").stdout.strip() == "from-env"


@pytest.mark.parametrize("word", ["1", "true", "TRUE", "yes", "on"])
def test_debug_true_words_turn_debug_on(clean_env, word):
    clean_env.setenv("MALAMAR_DEBUG", word)
    assert config.load().debug is True


@pytest.mark.parametrize("word", ["0", "false", "No", "off", ""])
def test_debug_false_words_and_unset_leave_it_off(clean_env, word):
    clean_env.setenv("MALAMAR_DEBUG", word)
    assert config.load().debug is False


@pytest.mark.parametrize("env", [o.env for o in config.OPTIONS if o.kind == "bool"])
def test_a_bad_boolean_is_an_error_naming_the_variable_and_the_words(clean_env, env):
    clean_env.setenv(env, "maybe")
    with pytest.raises(config.ConfigError) as err:
        config.read(config.OPTIONS_BY_NAME[env.removeprefix("MALAMAR_").lower()].name)
    message = str(err.value)
    assert env in message and "'maybe'" in message
    assert "1/true/yes/on" in message and "0/false/no/off" in message


def test_settings_and_malamar_refuse_a_bad_boolean(tmp_path):
    settings_import = _python(IMPORT_SETTINGS, tmp_path, MALAMAR_DEBUG="maybe")
    assert settings_import.returncode == 1
    assert "ImproperlyConfigured: MALAMAR_DEBUG (--debug) must be" in settings_import.stderr
    on = _python(IMPORT_SETTINGS, tmp_path, MALAMAR_DEBUG="true")
    assert on.stdout.strip() == "True"
    result = run_malamar("config", data_dir=tmp_path, MALAMAR_DEBUG="maybe")
    assert result.returncode == 2
    assert "MALAMAR_DEBUG" in result.stderr and "1/true/yes/on" in result.stderr


def _config_rows(stdout: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in stdout.splitlines()[2:] if line.strip()}


def test_malamar_config_lists_every_option_with_its_source(tmp_path):
    result = run_malamar(
        "config",
        "--port",
        "8080",
        "--log-format",
        "json",
        "--debug",
        data_dir=tmp_path,
        MALAMAR_PORT="9001",
        MALAMAR_SECRET_KEY="do-not-print-me",
    )
    assert result.returncode == 0, result.stderr
    rows = _config_rows(result.stdout)
    for option in config.OPTIONS:
        assert option.name in rows and rows[option.name][-1] == option.env, option.name
    assert rows["port"][1:3] == ["9001", "env"]
    assert rows["log_format"][1:3] == ["json", "flag"]
    assert rows["debug"][1:3] == ["yes", "flag"]
    assert rows["host"][1:3] == ["127.0.0.1", "default"]
    assert "do-not-print-me" not in result.stdout
    assert not (tmp_path / "secret_key").exists()


def test_malamar_config_never_prints_the_database_or_redis_address(tmp_path):
    result = run_malamar(
        "config",
        data_dir=tmp_path,
        DATABASE_URL="postgres://me:db-secret@db.example:5432/malamar",
        REDIS_URL="redis://:redis-secret@cache.example:6379/0",
    )
    assert result.returncode == 0, result.stderr
    rows = _config_rows(result.stdout)
    assert rows["database_url"][1:3] == ["(set)", "env"]
    assert rows["redis_url"][1:3] == ["(set)", "env"]
    for secret in ("db-secret", "redis-secret", "db.example", "cache.example"):
        assert secret not in result.stdout + result.stderr


WORKER_IMPORTS = """
import sys, django
django.setup()
from django.core.management import load_command_class
command = load_command_class("worker", "runworker")
print(command.requires_system_checks)
print(*sorted(name for name in ("twisted", "daphne", "ninja", "pydantic") if name in sys.modules))
"""


def test_the_worker_neither_imports_the_web_stack_nor_runs_the_system_checks(tmp_path):
    result = _python(WORKER_IMPORTS, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", ""]  # no Twisted, daphne, ninja or pydantic


def test_the_malamar_supervisor_does_not_load_django(tmp_path):
    code = "import sys, malamar_site.cli, core.prompt_exit; print('django' in sys.modules)"
    assert _python(code, tmp_path).stdout.strip() == "False"


def test_malamar_help_names_every_option(tmp_path):
    help_text = " ".join(run_malamar("help", data_dir=tmp_path).stdout.split())
    for option in config.OPTIONS:
        assert option.env in help_text, option.env
        assert not option.flag or option.flag in help_text, option.flag
    assert "1/true/yes/on or 0/false/no/off" in help_text


def test_an_option_read_where_it_is_used_is_checked_at_start_too(clean_env):
    clean_env.setenv("MALAMAR_PASSWORD_STDIN", "sure")
    with pytest.raises(config.ConfigError, match="MALAMAR_PASSWORD_STDIN"):
        config.load()


def test_new_ids_never_start_with_a_dash():
    """Ids go on command lines (`malamar mcp --workspace ID`, `malamar export ID`)."""
    ids = [new_id() for _ in range(5000)]
    assert not [one for one in ids if one.startswith("-")]
    assert {len(one) for one in ids} == {ID_LENGTH} and set("".join(ids)) <= set(ALPHABET)
    assert "-" in "".join(ids)  # still the whole alphabet after the first character
