"""Contexts of the chat pages: the chat list, the popup, and the workspace page's chat tab."""

from django.contrib import messages
from django.http import Http404

from chats import selectors, services
from chats.models import Chat
from workspaces.models import Workspace


def new_options(workspace_id: str) -> list[dict]:
    return selectors.chat_agent_options(workspace_id)["everyone"]


def popup_context(chat_id: str, **extra) -> dict:
    chat = selectors.chat_popup(chat_id)
    if chat is None:
        raise Http404("Chat not found")
    return {
        "chat": chat,
        "workspace_id": chat.workspace_id,
        "options": selectors.chat_agent_options(chat.workspace_id, chat),
        "runs": selectors.chat_runs(chat) if chat.is_busy else None,
        **extra,
    }


def draft_context(workspace: Workspace, agent_id: str = "", **extra) -> dict:
    options = new_options(workspace.id)
    if agent_id not in {option["id"] for option in options}:
        agent_id = ""
    return {
        "workspace": workspace,
        "draft": True,
        "draft_agent_id": agent_id,
        "new_options": options,
        **extra,
    }


def list_context(workspace: Workspace, query: str) -> dict:
    return {
        "workspace": workspace,
        "chats": selectors.chat_list_items(workspace.id, query),
        "chat_q": query,
        "new_options": new_options(workspace.id),
    }


def chat_tab_context(request, workspace) -> dict:
    """Extra context for the workspace detail page when the chats tab is shown: the list, and
    the popup to open on load (`?chat=<id>`, or `?start=malamar|<agent id>`: a new-chat form,
    nothing is created before the user sends)."""
    context = list_context(workspace, request.GET.get("q", "").strip())
    chat_id = request.GET.get("chat", "").strip()
    start = request.GET.get("start", "").strip()
    if chat_id:
        chat = Chat.objects.filter(id=chat_id, workspace=workspace).first()
        if chat is None:
            messages.error(request, "That chat no longer exists.")
        else:
            services.chat_seen(chat=chat)  # the popup opens with the page ("Needs you")
            context.update(popup_context(chat.id), chat_open=True)
    elif start:
        agent_id = "" if start == "malamar" else start
        context.update(draft_context(workspace, agent_id), chat_open=True)
    return context
