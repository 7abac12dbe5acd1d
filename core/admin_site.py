"""Django's admin, with the same sign-in rate limit as Malamar's own login page.

(With a password set, `core.middleware.LoginRequiredMiddleware` also puts the whole admin behind
Malamar's login, before the admin's own user login.)"""

import logging

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)


class MalamarAdminSite(admin.AdminSite):
    def login(self, request: HttpRequest, extra_context=None):
        from core.auth import client_address, login_limiter  # models: not while apps load

        if request.method == "POST" and not login_limiter.allow(client_address(request)):
            if login_limiter.first_refusal(client_address(request)):
                client = client_address(request)
                log.warning("Admin login rate limit reached", extra={"client": client})
            return HttpResponse(
                "Too many sign-in attempts. Wait a minute and try again.\n",
                status=429,
                content_type="text/plain; charset=utf-8",
            )
        return super().login(request, extra_context)


class MalamarAdminConfig(AdminConfig):
    default_site = "core.admin_site.MalamarAdminSite"
