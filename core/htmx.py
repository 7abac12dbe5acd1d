"""htmx response helpers shared by every app's views."""

from django_htmx.http import trigger_client_event


def toast(response, message: str, level: str = "success", detail: str = ""):
    """Ask the page for a toast (app.js listens for `malamar:toast`)."""
    payload = {"level": level, "message": message}
    if detail:
        payload["detail"] = detail
    return trigger_client_event(response, "malamar:toast", payload)
