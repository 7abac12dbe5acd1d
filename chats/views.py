"""Chats pages (htmx fragments). Thin: parse → service → fragment.

The Chat tab lists the workspace's chats; a chat opens in a popup (`chats/popup.html`) made of
the head (title, agent, CLI), the live part (agent pills, messages, the pending reply) and the
composer. A change answers with the part it changed; the live event it publishes refreshes the
others and the list (README "Live refreshes"). Validation errors answer 200 with the error in
the fragment or a toast (browsers log 4xx XHRs as console errors).
"""

from functools import partial

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import push_url, reswap, trigger_client_event

from chats import services
from chats.forms import (
    AgentChoiceForm,
    ChatMessageForm,
    ChatStartForm,
    ChatTitleForm,
    CliChoiceForm,
    IncludedForm,
)
from chats.models import Chat, ChatMessage, ChatParticipant
from chats.pages import draft_context, list_context, new_options, popup_context
from core.errors import Conflict, ServiceError
from core.htmx import gone, toast
from workspaces.links import workspace_tab_url
from workspaces.models import Workspace

PANEL = "chats/panel.html"
POPUP = "chats/popup.html"
MENU = "chats/new_menu.html"


# --- helpers ----------------------------------------------------------------------------


def _tab_url(workspace_id: str, **params) -> str:
    return workspace_tab_url(workspace_id, "chat", **params)


def chat_url(chat) -> str:
    return _tab_url(chat.workspace_id, chat=chat.id)


def _chat(chat_id: str) -> Chat:
    return get_object_or_404(Chat, id=chat_id)


def _error_only(message: str):
    """A refused change: nothing to swap, the reason as a toast (status 200, see above)."""
    return toast(reswap(HttpResponse(""), "none"), message, level="error")


def _no_js(request, chat, error: ServiceError | None = None, notice: str = ""):
    """Plain form posts (no JavaScript): back to the chat with a flash message."""
    if error is not None:
        messages.error(request, error.message)
    elif notice:
        messages.success(request, notice)
    return redirect(chat_url(chat))


# --- list -------------------------------------------------------------------------------


@require_GET
@vary_on_headers("HX-Request")
def chat_list(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    query = request.GET.get("q", "").strip()
    if not request.htmx:
        return redirect(_tab_url(workspace.id, q=query))
    return render(request, f"{PANEL}#chat_list", list_context(workspace, query))


@require_GET
@vary_on_headers("HX-Request")
def chat_new_menu(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    if not request.htmx:
        return redirect(_tab_url(workspace.id))
    context = {"workspace": workspace, "new_options": new_options(workspace.id)}
    return render(request, f"{MENU}#items", context)


@require_POST
def chat_new(request, workspace_id: str):
    """A new chat with the chosen agent (empty = Malamar). From the new-chat form (`draft`),
    the first message is sent with it."""
    workspace = get_object_or_404(Workspace, id=workspace_id)
    form = ChatStartForm(request.POST)
    form.is_valid()  # every field is optional text
    agent_id = form.cleaned_data.get("agent_id") or None
    message = form.cleaned_data.get("message") or ""
    draft = bool(request.POST.get("draft"))
    try:
        agent = services.chat_agent_resolve(workspace_id=workspace.id, agent_id=agent_id)
        if draft:
            chat = services.chat_start(workspace=workspace, agent=agent, message=message)
        else:
            chat = services.chat_create(workspace=workspace, agent=agent)
    except ServiceError as error:
        if not request.htmx:
            messages.error(request, error.message)
            start = (agent_id or "malamar") if draft else None
            return redirect(_tab_url(workspace.id, start=start))
        if draft:
            context = draft_context(
                workspace, agent_id or "", send_error=error.message, message_value=message
            )
            return render(request, f"{POPUP}#draft", context)
        return _error_only(error.message)
    if not request.htmx:
        return redirect(chat_url(chat))
    response = render(request, POPUP, popup_context(chat.id))
    return push_url(response, chat_url(chat))


# --- popup ------------------------------------------------------------------------------


# The popup's parts, by the id of the element htmx swaps one into (HX-Target).
POPUP_PARTS = {"chat-head": "head", "chat-live": "live"}


@require_GET
@vary_on_headers("HX-Request", "HX-Target")
def chat_popup(request, chat_id: str):
    """The chat popup, or the part of it that the request's HX-Target names."""
    part = POPUP_PARTS.get(request.htmx.target or "") if request.htmx else None
    chat = Chat.objects.filter(id=chat_id).first()
    if chat is None and part:
        return gone("This chat was deleted")  # a refresh on its way when it was deleted
    if chat is None:
        raise Http404("Chat not found")
    if not request.htmx:
        return redirect(chat_url(chat))
    services.chat_seen(chat=chat)  # the person looks at it now ("Needs you")
    template = f"{POPUP}#{part}" if part else POPUP
    return render(request, template, popup_context(chat.id))


def _head(request, chat: Chat, **extra):
    return render(request, f"{POPUP}#head", popup_context(chat.id, **extra))


def _live(request, chat: Chat, **extra):
    return render(request, f"{POPUP}#live", popup_context(chat.id, **extra))


@require_POST
def chat_rename(request, chat_id: str):
    chat = _chat(chat_id)
    form = ChatTitleForm(request.POST)
    error = None
    if form.is_valid():
        try:
            services.chat_update(chat=chat, title=form.cleaned_data["title"])
        except ServiceError as exc:
            error = exc.message
    else:
        error = " ".join(form.errors.get("title", ["Title is invalid"]))
    if not request.htmx:
        return _no_js(request, chat, ServiceError(error) if error else None, "Chat renamed")
    if error:
        title = request.POST.get("title", "")
        return _head(request, chat, editing=True, title_error=error, title_value=title)
    return _head(request, chat)


def _agent_choice(request) -> str | None:
    form = AgentChoiceForm(request.POST)
    form.is_valid()
    return form.cleaned_data.get("agent_id") or None


def _write_then(request, chat: Chat, fragment, write) -> HttpResponse:
    """Run `write` (a service call); answer with the refreshed `fragment`, plus an error toast
    when the service refused (without htmx: back to the chat with a message)."""
    try:
        write()
    except ServiceError as error:
        if not request.htmx:
            return _no_js(request, chat, error)
        return toast(fragment(request, chat), error.message, level="error")
    if not request.htmx:
        return _no_js(request, chat)
    return fragment(request, chat)


@require_POST
def chat_agent(request, chat_id: str):
    """Switch the (first) agent: the history stays, the CLI follows the new agent."""
    chat = _chat(chat_id)
    agent_id = _agent_choice(request)
    update = partial(services.chat_update, chat=chat, agent_id=agent_id)
    return _write_then(request, chat, _head, update)


@require_POST
def chat_cli(request, chat_id: str):
    """Set (or clear, with an empty value) the chat's CLI override."""
    chat = _chat(chat_id)
    form = CliChoiceForm(request.POST)
    error = None
    if form.is_valid():
        try:
            services.chat_update(chat=chat, cli_type=form.cleaned_data["cli_type"])
        except ServiceError as exc:
            error = exc
    else:
        error = ServiceError(" ".join(form.errors["cli_type"]))
    if not request.htmx:
        return _no_js(request, chat, error)
    response = _head(request, chat)
    if error:
        toast(response, error.message, level="error")
    return response


@require_POST
def chat_send(request, chat_id: str):
    """The user's message; answers with a fresh composer (or the text back with the reason)."""
    chat = _chat(chat_id)
    form = ChatMessageForm(request.POST)
    error = None
    if form.is_valid():
        try:
            services.chat_message_send(chat=chat, message=form.cleaned_data["message"])
        except ServiceError as exc:
            error = exc.message
    else:
        error = " ".join(form.errors["message"])
    if not request.htmx:
        return _no_js(request, chat, ServiceError(error) if error else None)
    extra = {"send_error": error, "message_value": request.POST.get("message", "")} if error else {}
    return render(request, f"{POPUP}#composer", popup_context(chat.id, **extra))


@require_POST
def chat_stop(request, chat_id: str):
    """Stop every pending answer (the worker kills the runs and discards their output)."""
    chat = _chat(chat_id)
    note = ""
    try:
        services.chat_cancel(chat=chat)
    except Conflict:
        note = "Nothing to stop: the agents already answered."
    if not request.htmx:
        return _no_js(request, chat, notice=note or "Stopping…")
    response = _live(request, chat)
    if note:
        toast(response, note, level="info")
    return response


@require_POST
def chat_upload(request, chat_id: str):
    """multipart/form-data: one or more `files`; one system message per stored file."""
    chat = _chat(chat_id)
    files = request.FILES.getlist("files")
    try:
        stored = services.chat_attachments_add(chat=chat, files=files)
    except ServiceError as error:
        if not request.htmx:
            return _no_js(request, chat, error)
        return toast(_live(request, chat), error.message, level="error")
    count = len(stored)
    notice = f"Uploaded {count} file{'s' if count != 1 else ''}"
    if not request.htmx:
        return _no_js(request, chat, notice=notice)
    return toast(_live(request, chat), notice)


@require_POST
def chat_delete(request, chat_id: str):
    chat = _chat(chat_id)
    workspace_id, title = chat.workspace_id, chat.title
    services.chat_delete(chat=chat)
    if not request.htmx:
        messages.success(request, f"Deleted “{title}”")
        return redirect(_tab_url(workspace_id))
    # The refreshed list (the request targets it: not the popup, which closes).
    workspace = get_object_or_404(Workspace, id=workspace_id)
    context = list_context(workspace, request.POST.get("q", "").strip())
    response = render(request, f"{PANEL}#chat_list", context)
    trigger_client_event(response, "malamar:dialog-close", {})
    return toast(response, f"Deleted “{title}”")


# --- group chat -------------------------------------------------------------------------


def _participant(chat: Chat, participant_id: str) -> ChatParticipant:
    return get_object_or_404(ChatParticipant, id=participant_id, chat=chat)


@require_POST
def participant_add(request, chat_id: str):
    chat = _chat(chat_id)
    agent_id = _agent_choice(request)
    add = partial(services.chat_participant_add, chat=chat, agent_id=agent_id)
    return _write_then(request, chat, _live, add)


@require_POST
def participant_toggle(request, chat_id: str, participant_id: str):
    """Turn a participant on or off (`enabled` = "1"/"0"; a disabled one does not answer)."""
    chat = _chat(chat_id)
    participant = _participant(chat, participant_id)
    enabled = request.POST.get("enabled", "")
    if enabled not in ("0", "1"):
        if not request.htmx:
            return _no_js(request, chat)
        return _error_only("Choose whether the agent answers (enabled 1 or 0).")
    services.chat_participant_update(participant=participant, enabled=enabled == "1")
    if not request.htmx:
        return _no_js(request, chat)
    return _live(request, chat)


@require_POST
def participant_remove(request, chat_id: str, participant_id: str):
    chat = _chat(chat_id)
    participant = _participant(chat, participant_id)
    remove = partial(services.chat_participant_remove, participant=participant)
    return _write_then(request, chat, _live, remove)


@require_POST
def message_include(request, chat_id: str, message_id: str):
    """The "include in context" checkbox: saved at once; nothing to swap (the page dims it)."""
    chat = _chat(chat_id)
    message = get_object_or_404(ChatMessage, id=message_id, chat=chat)
    form = IncludedForm(request.POST)
    form.is_valid()
    try:
        services.chat_message_set_included(
            message=message, included=bool(form.cleaned_data.get("included"))
        )
    except ServiceError as error:
        if not request.htmx:
            return _no_js(request, chat, error)
        return _error_only(error.message)
    if not request.htmx:
        return _no_js(request, chat)
    return HttpResponse(status=204)
