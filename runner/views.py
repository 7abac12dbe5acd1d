"""Agent run fragments for the live activity timeline."""

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runner.selectors import run_timeline


@require_GET
def run_fragment(request, run_id: str):
    """One run with its grouped traces; activity.js fetches it when it meets a run it lacks, or
    when one ends. A run gone meanwhile (its task deleted) is nothing to show there: 204."""
    run = run_timeline(run_id)
    if run is None and request.htmx:
        return HttpResponse(status=204)
    if run is None:
        raise Http404("No such run")
    return render(request, "components/run.html", {"run": run})
