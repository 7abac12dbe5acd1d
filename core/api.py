"""The JSON API under /api/ (django-ninja; OpenAPI at /api/docs)."""

import json
import logging
from datetime import datetime
from typing import Any, Literal

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.db import connection
from django.http import Http404
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from ninja import Body, Field, NinjaAPI, Router, Schema, Status, Swagger
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.openapi.docs import _csrf_needed

from agents.api import router as agents_router
from agents.models import CliType
from chats.api import router as chats_router
from core import settings_store
from core.errors import ServiceError
from core.http import error_response
from core.json_input import BodyRefused, JsonObjectParser
from core.limits import fields_too_large_message
from core.middleware import too_large_response
from core.version import VERSION
from runner import services as runner_services
from runner.api import router as runs_router
from runner.selectors import cli_health_all
from tasks.api import router as tasks_router
from workspaces.api import router as workspaces_router

log = logging.getLogger(__name__)


class LocalSwagger(Swagger):
    """ninja's Swagger page rendered from its template (found through TEMPLATES' DIRS: ninja is
    not an installed app, see settings.NINJA_DIR); ninja itself renders its CDN page then."""

    def render_page(self, request, api, **kwargs):
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        context = {
            "swagger_settings": json.dumps(self.settings, indent=1),
            "api": api,
            "add_csrf": _csrf_needed(api),
        }
        return render(request, self.template, context)


api = NinjaAPI(
    title="Malamar API",
    version=VERSION,
    description=(
        "Workspaces, agents, tasks, comments, chats, settings and health of a Malamar server."
    ),
    urls_namespace="api",
    parser=JsonObjectParser(),
    # Swagger UI from ninja's own static files with its init script as a file, so /api/docs
    # works under the strict CSP with no CDN. No validator badge: it would call
    # validator.swagger.io.
    docs=LocalSwagger(settings={"validatorUrl": None}),
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
    cause = exc.__cause__
    if isinstance(cause, BodyRefused):  # ninja wraps the parser's error: keep its message
        return error_response(400, str(cause))
    if isinstance(cause, RequestDataTooBig):
        return too_large_response(request, fields_too_large_message())
    return error_response(exc.status_code, str(exc))


@api.exception_handler(BodyRefused)
def on_body_refused(request, exc: BodyRefused):
    return error_response(400, str(exc))


@api.exception_handler(RequestDataTooBig)
def on_too_big(request, exc):
    return too_large_response(request, fields_too_large_message())


@api.exception_handler(MultiPartParserError)
def on_bad_upload(request, exc):
    return error_response(400, f"Could not read the upload: {exc}")


@api.exception_handler(SuspiciousOperation)
def on_suspicious(request, exc):  # e.g. too many fields or files in one upload
    return error_response(400, f"Request refused: {exc}")


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
    """Any subset of the settings keys; secrets equal to their mask are kept unchanged.

    Validated exactly as the settings page validates (email addresses, http(s) URLs with a
    host, minutes above 0, variable names, a binary path that exists, is a file and is
    executable): any invalid field is a 400 naming each field, and nothing is stored. Saving a
    CLI's settings asks the worker to re-check that CLI at once (see `/health/cli`)."""
    return runner_services.settings_save(changes=payload)


class CliHealthOut(Schema):
    cli_type: str
    name: str
    status: Literal["not_checked", "healthy", "slow", "unhealthy"] = Field(
        description=(
            '"slow": a CLI that was healthy did not answer the health check in time, twice; '
            "it stays available and is checked again in 5 minutes."
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
        "clis_available": sum(1 for c in clis if c["status"] in ("healthy", "slow")),
    }


@core_router.get("/health/cli", response=CliHealthList)
def health_cli(request):
    return {"clis": cli_health_all()}


@core_router.post("/health/cli/refresh", response={202: CliHealthList})
def health_cli_refresh(request):
    runner_services.cli_health_refresh_request()
    return Status(202, {"clis": cli_health_all()})


@core_router.post("/health/cli/{cli_type}/check", response={202: CliHealthOut})
def health_cli_check(request, cli_type: CliType):
    """Test one CLI: the worker sends it the real minimal prompt. Poll `/health/cli` (or listen
    for `cli.health_changed`) until its `refresh_requested_at` is null; `answer` or `error`
    then holds the result."""
    runner_services.cli_health_check_request(cli_types=[cli_type])
    return Status(202, next(c for c in cli_health_all() if c["cli_type"] == cli_type))


api.add_router("", workspaces_router)
api.add_router("", agents_router)
api.add_router("", tasks_router)
api.add_router("", chats_router)
api.add_router("", runs_router)
api.add_router("", core_router)
