"""htmx response helpers shared by every app's views."""

from django.http import HttpResponse
from django_htmx.http import reswap, trigger_client_event


def toast(response, message: str, level: str = "success", detail: str = ""):
    """Ask the page for a toast (app.js listens for `malamar:toast`)."""
    payload = {"level": level, "message": message}
    if detail:
        payload["detail"] = detail
    return trigger_client_event(response, "malamar:toast", payload)


def gone(message: str) -> HttpResponse:
    """The answer to a refresh of something deleted meanwhile: nothing to swap (200, so the
    browser logs no error), and the popup that shows it closes, saying `message` (app.js)."""
    response = reswap(HttpResponse(), "none")
    return trigger_client_event(response, "malamar:gone", {"message": message})


def live(response, event_type: str):
    """Refresh this page's fragments that declare `event_type` (data-live), as the event stream
    would: for a change that publishes no event (a CLI check asked for)."""
    return trigger_client_event(response, "malamar:live", {"type": event_type})
