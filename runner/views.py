"""Agent run fragments for the live activity timeline."""

from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from runner.selectors import run_output_text, run_timeline


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


@require_GET
def run_output(request, run_id: str):
    """A check run's whole output as plain text (its failure comment links here)."""
    text = run_output_text(run_id)
    if text is None:
        raise Http404("No such check run")
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["X-Content-Type-Options"] = "nosniff"
    return response
