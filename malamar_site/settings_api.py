"""Settings and health endpoints of the JSON API (they span the runner and notifications)."""

from datetime import datetime
from typing import Any, Literal

from django.db import connection
from ninja import Body, Field, Router, Schema, Status

from agents.models import CliType
from core import settings_store
from core.version import VERSION
from notifications.services import test_email_send
from runner import services as runner_services
from runner.selectors import cli_health_all

router = Router(tags=["settings & health"])


@router.get("/settings", response=dict[str, Any])
def get_settings(request):
    return settings_store.settings_public()


@router.put("/settings", response=dict[str, Any])
def update_settings(request, payload: Body[dict[str, Any]]):
    """Any subset of the settings keys; secrets equal to their mask are kept unchanged.

    Validated exactly as the settings page validates (email addresses, http(s) URLs with a
    host, minutes above 0, variable names, a binary path that exists, is a file and is
    executable, a CLI's `health_timeout_seconds` from 5 to 3600): any invalid field is a 400
    naming each field, and nothing is stored. Saving a CLI's settings asks the worker to
    re-check that CLI at once (see `/health/cli`)."""
    return runner_services.settings_save(changes=payload)


class CliHealthOut(Schema):
    cli_type: str
    name: str
    status: Literal["not_checked", "healthy", "slow", "unhealthy"] = Field(
        description=(
            '"slow": the health prompt took longer than the CLI\'s time limit '
            "(`cli_settings.<cli>.health_timeout_seconds`, default 90, counted from its first "
            'output): it stays available and is checked again in 5 minutes. Only "unhealthy" '
            "(not found, not executable, not that CLI, logged out, an error answer) makes a "
            "CLI unavailable."
        )
    )
    available: bool
    error: str
    version: str
    binary_path: str
    answer: str = Field(description="What the CLI answered to the last health prompt.")
    checked_at: datetime | None
    refresh_requested_at: datetime | None = Field(
        description="A check asked for and not done yet (cleared when the worker has answered)."
    )
    limited: bool = Field(
        description="Out of quota (a usage or rate limit): work that needs it waits, no errors."
    )
    limited_until: datetime | None = Field(
        description="When its quota resets, as the CLI said; null while limited: unknown."
    )
    limit_message: str = Field(description="What the CLI said when it ran out of quota.")
    probe_at: datetime | None = Field(
        description="Limited without a reset time: when a health prompt checks it next "
        "(5, 15, 30, then every 60 minutes)."
    )


class CliHealthList(Schema):
    clis: list[CliHealthOut]


class Success(Schema):
    success: bool


@router.post("/settings/test-email", response=Success)
def test_email(request):
    """Send a test email with the saved Mailgun settings and wait for Mailgun's answer."""
    test_email_send()
    return {"success": True}


@router.get("/health")
def health(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    clis = cli_health_all()
    return {
        "status": "ok",
        "version": VERSION,
        "database": "ok",
        "clis_available": sum(1 for c in clis if c["status"] in ("healthy", "slow")),
    }


@router.get("/health/cli", response=CliHealthList)
def health_cli(request):
    return {"clis": cli_health_all()}


@router.post("/health/cli/refresh", response={202: CliHealthList})
def health_cli_refresh(request):
    runner_services.cli_health_refresh_request()
    return Status(202, {"clis": cli_health_all()})


@router.post("/health/cli/{cli_type}/check", response={202: CliHealthOut})
def health_cli_check(request, cli_type: CliType):
    """Test one CLI: the worker sends it the real minimal prompt. Poll `/health/cli` (or listen
    for `cli.health_changed`) until its `refresh_requested_at` is null; `answer` or `error`
    then holds the result."""
    runner_services.cli_health_check_request(cli_types=[cli_type])
    return Status(202, next(c for c in cli_health_all() if c["cli_type"] == cli_type))
