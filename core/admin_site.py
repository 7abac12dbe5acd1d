"""Django's admin, with the same sign-in rate limit as Malamar's own login page.

(With a password set, `core.middleware.LoginRequiredMiddleware` also puts the whole admin behind
Malamar's login, before the admin's own user login.)"""

import logging

from django.contrib import admin, messages
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)


MAX_SEARCH_WORDS = 20
MAX_SEARCH_CHARS = 1000


class SearchLimitedAdmin(admin.ModelAdmin):
    """An admin list whose search box cannot build a query the database refuses: every word
    is a LIKE over every search field, and thousands of words are an expression SQLite will
    not parse (a 500). A longer search finds nothing and says why."""

    def get_search_results(self, request, queryset, search_term):
        if len(search_term) > MAX_SEARCH_CHARS or len(search_term.split()) > MAX_SEARCH_WORDS:
            limit = f"at most {MAX_SEARCH_WORDS} words and {MAX_SEARCH_CHARS} characters"
            self.message_user(request, f"Search for {limit}.", messages.WARNING)
            return queryset.none(), False
        return super().get_search_results(request, queryset, search_term)


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
