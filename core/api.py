"""What every Malamar JSON API shares: the JSON parser, the docs and the error handlers.

The API itself, with every app's router, is malamar_site/api.py (core knows no app)."""

import json
import logging

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import Http404
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from ninja import NinjaAPI, Swagger
from ninja.errors import HttpError
from ninja.errors import ValidationError as NinjaValidationError
from ninja.openapi.docs import _csrf_needed

from core.errors import ServiceError
from core.http import error_response
from core.json_input import BodyRefused, JsonObjectParser
from core.limits import fields_too_large_message
from core.views import too_large_response

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


def _field_of(loc) -> str:
    parts = [str(p) for p in loc if p not in ("body", "payload", "query", "path")]
    return ".".join(parts) or "body"


def on_validation_error(request, exc: NinjaValidationError):
    first = exc.errors[0] if exc.errors else {}
    field = _field_of(first.get("loc", ()))
    message = first.get("msg", "Invalid request")
    if first.get("type") == "extra_forbidden":
        message = "is not a known field"
    return error_response(400, f"{field}: {message}")


def on_service_error(request, exc: ServiceError):
    return error_response(exc.status, exc.message, exc.code, exc.details)


def on_http_error(request, exc: HttpError):
    cause = exc.__cause__
    if isinstance(cause, BodyRefused):  # ninja wraps the parser's error: keep its message
        return error_response(400, str(cause))
    if isinstance(cause, RequestDataTooBig):
        return too_large_response(request, fields_too_large_message())
    return error_response(exc.status_code, str(exc))


def on_body_refused(request, exc: BodyRefused):
    return error_response(400, str(exc))


def on_too_big(request, exc):
    return too_large_response(request, fields_too_large_message())


def on_bad_upload(request, exc):
    return error_response(400, f"Could not read the upload: {exc}")


def on_suspicious(request, exc):  # e.g. too many fields or files in one upload
    return error_response(400, f"Request refused: {exc}")


def on_404(request, exc):
    return error_response(404, "Not found")


def on_unexpected(request, exc):
    log.exception("Unhandled API error", extra={"path": request.path})
    return error_response(500, "Internal server error")


def api_create(**options) -> NinjaAPI:
    """A NinjaAPI with Malamar's JSON parser, offline docs and error handlers."""
    api = NinjaAPI(
        parser=JsonObjectParser(),
        # Swagger UI from ninja's own static files with its init script as a file, so /api/docs
        # works under the strict CSP with no CDN. No validator badge: it would call
        # validator.swagger.io.
        docs=LocalSwagger(settings={"validatorUrl": None}),
        **options,
    )
    api.add_exception_handler(NinjaValidationError, on_validation_error)
    api.add_exception_handler(ServiceError, on_service_error)
    api.add_exception_handler(HttpError, on_http_error)
    api.add_exception_handler(BodyRefused, on_body_refused)
    api.add_exception_handler(RequestDataTooBig, on_too_big)
    api.add_exception_handler(MultiPartParserError, on_bad_upload)
    api.add_exception_handler(SuspiciousOperation, on_suspicious)
    api.add_exception_handler(Http404, on_404)
    api.add_exception_handler(Exception, on_unexpected)
    return api
