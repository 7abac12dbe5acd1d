from django.contrib import admin
from django.http import HttpResponse
from django.urls import path

from core import sse
from core.api import api


def home(request):
    # Placeholder until the web UI lands: point people at the API docs.
    return HttpResponse(
        "<!doctype html><title>Malamar</title><h1>Malamar</h1>"
        "<p>The API is at <a href='/api/docs'>/api/docs</a>.</p>"
    )


urlpatterns = [
    path("", home, name="home"),
    path("api/events", sse.events, name="events"),
    path("api/", api.urls),
    path("admin/", admin.site.urls),
]

handler400 = "core.views.bad_request"
handler403 = "core.views.forbidden"
handler404 = "core.views.not_found"
handler500 = "core.views.server_error"
