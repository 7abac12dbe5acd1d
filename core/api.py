"""The JSON API under /api/ (django-ninja; OpenAPI at /api/docs)."""

import logging
from datetime import datetime
from typing import Any

from django.db import connection
from django.http import Http404
from ninja import Body, NinjaAPI, Router, Schema, Status, Swagger
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError

from agents.api import router as agents_router
from chats.api import router as chats_router
from core import settings_store
from core.errors import ServiceError
from core.http import error_response
from core.version import VERSION
from runner import services as runner_services
from runner.api import router as runs_router
from runner.selectors import cli_health_all
from tasks.api import router as tasks_router
from workspaces.api import router as workspaces_router

log = logging.getLogger(__name__)

api = NinjaAPI(
    title="Malamar API",
    version=VERSION,
    description=(
        "Workspaces, agents, tasks, comments, chats, settings and health of a Malamar server."
    ),
    urls_namespace="api",
    # Swagger UI from ninja's own static files with its init script as a file (ninja is in
    # INSTALLED_APPS), so /api/docs works under the strict CSP with no CDN. No validator badge:
    # it would call validator.swagger.io.
    docs=Swagger(settings={"validatorUrl": None}),
)


def _field_of(loc) -> str:
    parts = [str(p) for p in loc if p not in ("body", "payload", "query", "path")]
    return ".".join(parts) or "body"


@api.exception_handler(NinjaValidationError)
def on_validation_error(request, exc: NinjaValidationError):
    first = exc.errors[0] if exc.errors else {}
    field = _field_of(first.get("loc", ()))
    message = first.get("msg", "Invalid request")
    if first.get("type") == "extra_forbidden":
        message = "is not a known field"
    return error_response(400, f"{field}: {message}")


@api.exception_handler(ServiceError)
def on_service_error(request, exc: ServiceError):
    return error_response(exc.status, exc.message, exc.code)


@api.exception_handler(HttpError)
def on_http_error(request, exc: HttpError):
    return error_response(exc.status_code, str(exc))


@api.exception_handler(Http404)
def on_404(request, exc):
    return error_response(404, "Not found")


@api.exception_handler(Exception)
def on_unexpected(request, exc):
    log.exception("Unhandled API error", extra={"path": request.path})
    return error_response(500, "Internal server error")


core_router = Router(tags=["settings & health"])


@core_router.get("/settings", response=dict[str, Any])
def get_settings(request):
    return settings_store.settings_public()


@core_router.put("/settings", response=dict[str, Any])
def update_settings(request, payload: Body[dict[str, Any]]):
    """Any subset of the settings keys; secrets equal to their mask are kept unchanged."""
    return settings_store.settings_update(changes=payload)


class CliHealthOut(Schema):
    cli_type: str
    name: str
    status: str
    available: bool
    error: str
    version: str
    binary_path: str
    checked_at: datetime | None
    refresh_requested_at: datetime | None


class CliHealthList(Schema):
    clis: list[CliHealthOut]


class Success(Schema):
    success: bool


@core_router.post("/settings/test-email", response=Success)
def test_email(request):
    """Send a test email with the saved Mailgun settings and wait for Mailgun's answer."""
    from notifications.services import test_email_send

    test_email_send()
    return {"success": True}


@core_router.get("/health")
def health(request):
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    clis = cli_health_all()
    return {
        "status": "ok",
        "version": VERSION,
        "database": "ok",
        "clis_available": sum(1 for c in clis if c["status"] == "healthy"),
    }


@core_router.get("/health/cli", response=CliHealthList)
def health_cli(request):
    return {"clis": cli_health_all()}


@core_router.post("/health/cli/refresh", response={202: CliHealthList})
def health_cli_refresh(request):
    runner_services.cli_health_refresh_request()
    return Status(202, {"clis": cli_health_all()})


api.add_router("", workspaces_router)
api.add_router("", agents_router)
api.add_router("", tasks_router)
api.add_router("", chats_router)
api.add_router("", runs_router)
api.add_router("", core_router)
