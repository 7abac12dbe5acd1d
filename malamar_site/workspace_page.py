"""The workspace page's context, shared by the apps whose tabs it shows (tasks, chat, agents).

Each tab's own context is built by its app's pages module; this module puts the page together.
"""

from agents import selectors as agent_selectors
from chats.pages import chat_tab_context
from malamar_site import selectors
from tasks.pages import task_tab_context
from workspaces.models import Workspace

TABS = ("tasks", "chat", "agents")
DETAIL = "workspaces/detail.html"
# Plain form posts without JavaScript that fail validation get 422 with the whole page
# (htmx fragments with validation errors answer 200: browsers log every 4xx XHR).
INVALID = 422


def detail_context(workspace: Workspace, tab: str) -> dict:
    agents = agent_selectors.agents_for_workspace(workspace)
    return {
        "workspace": workspace,
        "tab": tab,
        "agents": agents,
        "unhealthy": selectors.unhealthy_agent_clis(agents),
        "limited": selectors.limited_clis(workspace),
        "directory_hint": selectors.working_directory_hint(workspace),
    }


def workspace_page_context(request, workspace: Workspace, tab: str) -> dict:
    """The whole workspace page on `tab`, with that tab's own context."""
    context = detail_context(workspace, tab)
    if tab == "tasks":
        context.update(task_tab_context(request, workspace))
    elif tab == "chat":
        context.update(chat_tab_context(request, workspace))
    return context
