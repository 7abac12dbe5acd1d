"""htmx response helpers shared by every app's views."""

import json

from django.http import HttpResponse
from django.shortcuts import render
from django_htmx.http import reswap, retarget, trigger_client_event


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


def refused(message: str) -> HttpResponse:
    """The answer to a change the services refused: nothing swapped (200, so the browser logs
    no error), and a toast that says why."""
    return toast(reswap(HttpResponse(), "none"), message, "error")


def live(response, event_type: str):
    """Refresh this page's fragments that declare `event_type` (data-live), as the event stream
    would: for a change that publishes no event (a CLI check asked for)."""
    return trigger_client_event(response, "malamar:live", {"type": event_type})


def merge_choice(request, task, *, url: str, values: dict, target: str, include: str = ""):
    """The merge-or-keep dialog (Done means merged) in the page's #merge-choice: each choice
    posts `values` with `merge` "1" or "0" to `url`, and its answer lands in `target`."""
    context = {
        "task": task,
        "choice_url": url,
        "merge_values": json.dumps({**values, "merge": "1"}),
        "keep_values": json.dumps({**values, "merge": "0"}),
        "choice_target": target,
        "choice_include": include,
    }
    response = render(request, "components/merge_choice.html", context)
    return reswap(retarget(response, "#merge-choice-body"), "innerHTML")
