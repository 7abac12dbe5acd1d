"""The global settings page: CLIs, notifications and API tokens (it spans several apps)."""

from django.conf import settings
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from core import auth, settings_store
from core.errors import ServiceError
from core.forms import CliSettingsForm, NotificationSettingsForm, apply_service_error
from core.htmx import live, toast
from core.models import ApiToken
from notifications.services import test_email_send
from runner import selectors as runner_selectors
from runner import services as runner_services
from runner.clis import CliType
from worker.selectors import workers_live

SETTINGS = "core/settings.html"


def _with_form(card: dict, form: CliSettingsForm | None = None) -> dict:
    settings = card["settings"]
    return {
        **card,
        "form": form
        or CliSettingsForm(cli_type=card["cli_type"], stored_env=settings["env"], initial=settings),
    }


def _cli_or_404(cli_type: str) -> str:
    if cli_type not in CliType.values:
        raise Http404("Unknown CLI")
    return cli_type


@require_GET
def global_settings(request):
    context = {
        "cards": [_with_form(c) for c in runner_selectors.cli_cards()],
        "notifications_form": NotificationSettingsForm.from_settings(
            settings_store.settings_public()
        ),
        **_access_context(),
        "workers": workers_live(),
        "several_workers": settings.CONFIG.uses_postgres,
    }
    return render(request, SETTINGS, context)


@require_POST
def notifications_save(request):
    form = NotificationSettingsForm(request.POST)
    saved = False
    if form.is_valid():
        try:
            runner_services.settings_save(changes=form.cleaned_data)
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            saved = True
    if not request.htmx:
        return redirect("global_settings")
    if saved:
        form = NotificationSettingsForm.from_settings(settings_store.settings_public())
    response = render(request, f"{SETTINGS}#notifications", {"notifications_form": form})
    if saved:
        trigger_client_event(
            response,
            "malamar:toast",
            {"level": "success", "message": "Notification settings saved"},
        )
    return response


@require_POST
def notifications_test(request):
    """Send the test email with the saved settings and tell the result in a toast."""
    try:
        test_email_send()
        note = {"level": "success", "message": "Test email sent", "detail": "Check your inbox."}
    except ServiceError as error:
        note = {"level": "error", "message": "Test email failed", "detail": error.message}
    if not request.htmx:
        return redirect("global_settings")
    response = HttpResponse(status=204)
    trigger_client_event(response, "malamar:toast", note)
    return response


def _access_context(new_token: str = "") -> dict:
    tokens = list(ApiToken.objects.order_by("-created_at"))
    return {"access_mode": auth.access_mode(), "tokens": tokens, "new_token": new_token}


def _tokens_response(request, new_token: str = ""):
    if not request.htmx:
        return redirect("global_settings")
    return render(request, f"{SETTINGS}#tokens", _access_context(new_token))


@require_POST
def token_create(request):
    try:
        _token, raw = auth.token_create(name=request.POST.get("name", ""))
    except ServiceError as exc:
        response = _tokens_response(request)
        toast(response, exc.message, "error")
        return response
    return _tokens_response(request, new_token=raw)


@require_POST
def token_revoke(request, token_id: str):
    try:
        auth.token_revoke(token_id=token_id)
    except ServiceError:
        raise Http404 from None
    return _tokens_response(request)


@require_POST
def cli_settings_save(request, cli_type: str):
    card = runner_selectors.cli_card(_cli_or_404(cli_type))
    form = CliSettingsForm(request.POST, cli_type=cli_type, stored_env=card["settings"]["env"])
    saved = False
    if form.is_valid():
        try:
            # Validated by the settings service; the worker re-checks the CLI right away.
            runner_services.settings_save(
                changes={"cli_settings": {cli_type: form.cleaned_data["change"]}}
            )
        except ServiceError as error:
            # The service names "cli_settings.<cli>.binary_path" or "...env[.NAME]".
            apply_service_error(form, error, prefix=f"cli_settings.{cli_type}.")
        else:
            saved = True
    if not request.htmx:
        if saved:
            return redirect("global_settings")
        cards = [
            _with_form(c, form if c["cli_type"] == cli_type else None)
            for c in runner_selectors.cli_cards()
        ]
        return render(request, SETTINGS, {"cards": cards}, status=422)  # no JavaScript
    card = _with_form(runner_selectors.cli_card(cli_type), None if saved else form)
    response = render(request, f"{SETTINGS}#cli_form", {"card": card})
    if saved:
        message = f"{CliType(cli_type).label} settings saved"
        toast(response, message, "success", detail="Checking it now…")
        live(response, "cli.checking")  # its card shows "Checking…"
    return response


@require_POST
def cli_test(request, cli_type: str):
    """The CLI's Test button: the worker sends it the real minimal prompt; its card shows
    "Checking…", then the CLI's answer or error when it arrives (cli.health_changed, or the
    card's own polling while a check is pending)."""
    runner_services.cli_health_check_request(cli_types=[_cli_or_404(cli_type)])
    if not request.htmx:
        return redirect("global_settings")
    return render(request, f"{SETTINGS}#cli_status", {"card": runner_selectors.cli_card(cli_type)})


@require_GET
def cli_status(request, cli_type: str):
    card = runner_selectors.cli_card(_cli_or_404(cli_type))
    return render(request, f"{SETTINGS}#cli_status", {"card": card})


@require_GET
def cli_env_row(request, cli_type: str):
    """An empty environment variable row for the CLI's form ("Add variable")."""
    return render(request, f"{SETTINGS}#env_row", {"cli": _cli_or_404(cli_type)})


@require_POST
def cli_refresh(request):
    runner_services.cli_health_refresh_request()
    if not request.htmx:
        return redirect("global_settings")
    response = HttpResponse(status=204)
    live(response, "cli.checking")
    toast(response, "Checking every CLI…", "info")
    return response


@require_GET
def cli_warning(request):
    return render(request, "base.html#cli_warning")
