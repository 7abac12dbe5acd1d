"""Sign in and out (only used when a password is set)."""

import logging

from django import forms
from django.http import HttpRequest
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from core.auth import (
    SESSION_FLAG,
    client_address,
    login_limiter,
    password_check,
    password_is_set,
)

log = logging.getLogger(__name__)
REMEMBER_SECONDS = 30 * 24 * 3600


class LoginForm(forms.Form):
    password = forms.CharField(
        widget=forms.PasswordInput(attrs={"autocomplete": "current-password", "autofocus": True})
    )
    remember = forms.BooleanField(required=False, label="Keep me signed in for 30 days")


def _next(request: HttpRequest) -> str:
    target = request.POST.get("next") or request.GET.get("next") or "/"
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return "/"


def login_view(request: HttpRequest):
    if not password_is_set() or request.session.get(SESSION_FLAG):
        return redirect(_next(request))
    form = LoginForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if not login_limiter.allow(client_address(request)):
            if login_limiter.first_refusal(client_address(request)):
                log.warning("Login rate limit reached", extra={"client": client_address(request)})
            form.add_error(None, "Too many attempts. Wait a minute and try again.")
            status = 429
        elif form.is_valid() and password_check(form.cleaned_data["password"]):
            request.session.cycle_key()
            request.session[SESSION_FLAG] = True
            request.session.set_expiry(REMEMBER_SECONDS if form.cleaned_data["remember"] else 0)
            log.info("Signed in", extra={"client": client_address(request)})
            return redirect(_next(request))
        else:
            log.warning("Failed sign-in", extra={"client": client_address(request)})
            form.add_error("password", "Wrong password.")
            status = 401
    context = {"form": form, "next": _next(request)}
    return render(request, "core/login.html", context, status=status)


@require_POST
def logout_view(request: HttpRequest):
    request.session.flush()
    return redirect("/login/")
