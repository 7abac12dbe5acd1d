"""The "Needs you" page (issue 29): what waits for the person in every workspace, each row with
its verdict inline. The header's count and the home page's section (a phone's first screen)
are parts of it, read from the same URL by the id of the element they land in (HX-Target).

Thin: parse → service (tasks and chats own the rules) → the part that sent the request."""

from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import trigger_client_event

from chats import services as chat_services
from chats.models import Chat
from core.actors import USER
from core.errors import NotFound, ServiceError
from core.htmx import merge_choice, refused, toast
from malamar_site.needs_you import HOME_ROWS, LIST_LIMIT, needs_you, needs_you_count
from tasks import selectors as task_selectors
from tasks import services as task_services
from tasks.models import Task

PAGE = "needs_you/page.html"
# The parts, by the id of the element that shows one.
PARTS = {"needs-you-list": "list", "home-needs-you": "home", "needs-you-count": "count"}


def _part_context(part: str) -> dict:
    if part == "count":
        return {"count": needs_you_count()}
    found = needs_you(limit=HOME_ROWS if part == "home" else LIST_LIMIT)
    working = 0 if found.count else task_selectors.working_count()
    return {"inbox": found, "working": working, "needs_you_count": found.count}


def _part_of(request) -> str:
    return PARTS.get(request.htmx.target or "", "list") if request.htmx else "list"


@require_GET
@vary_on_headers("HX-Request", "HX-Target")
def needs_you_page(request):
    """The page, or the part of it that the request's HX-Target names (a live refresh)."""
    if request.htmx and request.htmx.target in PARTS:
        part = PARTS[request.htmx.target]
        return render(request, f"{PAGE}#{part}", _part_context(part))
    return render(request, PAGE, _part_context("list"))


def _answer(request, note: str = "", error: ServiceError | None = None):
    """After a row's action: the part that sent it, refreshed, with a toast; a refusal changes
    nothing on the page and says why. Without JavaScript: back to the page."""
    if not request.htmx:
        if error is not None:
            messages.error(request, error.message)
        elif note:
            messages.success(request, note)
        return redirect("needs_you")
    if error is not None:  # (the merge-or-keep dialog that asked closes)
        return trigger_client_event(refused(error.message), "malamar:dialog-close", {})
    part = _part_of(request)
    response = render(request, f"{PAGE}#{part}", _part_context(part))
    trigger_client_event(response, "malamar:dialog-close", {})
    return toast(response, note) if note else response


MERGE_CHOICES = {"1": True, "0": False}


@require_POST
def needs_you_review(request, task_id: str):
    """A verdict from a row: Approve (a branch with work its base lacks asks to merge or keep
    it first, as the task's own Approve does) or Request changes (with what to change)."""
    task = Task.objects.select_related("workspace").filter(id=task_id).first()
    if task is None:
        return _answer(request, error=NotFound("This task no longer exists"))
    verdict = request.POST.get("verdict", "")
    try:
        review = task_services.task_review_submit(
            task=task,
            verdict=verdict,
            body=request.POST.get("body", ""),
            merge=MERGE_CHOICES.get(request.POST.get("merge", "")),
            actor=USER,
        )
    except task_services.MergeChoiceRequired as error:
        if not request.htmx:
            return _answer(request, error=error)
        return merge_choice(
            request,
            task,
            url=reverse("needs_you_review", args=[task.id]),
            values={"verdict": "approve"},
            target=f"#{request.htmx.target or 'needs-you-list'}",
        )
    except ServiceError as error:
        return _answer(request, error=error)
    if review.merge is not None:
        note = f"Merged into {task.branch_base} and finished"
    elif verdict == "approve":
        note = "Approved: the task is Done"
    else:
        note = "Sent back to the agents"
    return _answer(request, note)


@require_POST
def needs_you_retry(request, task_id: str):
    """ "Retry now" on a failing task's row."""
    task = Task.objects.filter(id=task_id).first()
    try:
        if task is None:
            raise NotFound("This task no longer exists")
        task_services.task_retry_now(task=task)
    except ServiceError as error:
        return _answer(request, error=error)
    return _answer(request, "Retrying now")


@require_POST
def needs_you_chat_seen(request, chat_id: str):
    """ "Mark as read" on a chat's row: its replies so far no longer wait for the person."""
    chat = Chat.objects.filter(id=chat_id).first()
    if chat is None:
        return _answer(request, error=NotFound("This chat no longer exists"))
    chat_services.chat_seen(chat=chat)
    return _answer(request, "Marked as read")
