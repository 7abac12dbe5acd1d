"""Agent pages (the Agents tab): create/edit dialog, delete, reorder. Thin: parse → service →
fragment. Changes answer with the re-rendered agents panel."""

from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import reswap, retarget, trigger_client_event

from agents import selectors, services
from agents.forms import AgentForm
from agents.models import Agent
from chats.services import chats_agent_delete
from core.errors import ServiceError
from core.forms import apply_service_error
from core.htmx import toast as toast_event
from malamar_site.workspace_page import DETAIL, INVALID, detail_context
from workspaces.links import workspace_tab_url
from workspaces.models import Workspace

PANEL = f"{DETAIL}#agents_panel"


def _agents_url(workspace_id: str) -> str:
    return workspace_tab_url(workspace_id, "agents")


def _panel(request, workspace: Workspace, *, toast: str = "", close_dialog: bool = False):
    """The refreshed agents panel (htmx), or back to the Agents tab (plain form posts)."""
    if not request.htmx:
        return redirect(_agents_url(workspace.id))
    context = {"workspace": workspace, "agents": selectors.agents_for_workspace(workspace)}
    response = render(request, PANEL, context)
    response = reswap(retarget(response, "#agents-panel"), "innerHTML")
    if close_dialog:
        trigger_client_event(response, "malamar:dialog-close", {})
    if toast:
        toast_event(response, toast)
    return response


def _agent_form_context(workspace: Workspace, form: AgentForm, agent=None) -> dict:
    """Context for the agent dialog."""
    return {
        "workspace": workspace,
        "agent": agent,
        "agent_form": form,
        "cli_options": selectors.agent_cli_options(),
        "cli_panels": selectors.cli_setting_panels(),
    }


def _form_page(request, workspace: Workspace, form: AgentForm, agent=None, status: int = 200):
    context = _agent_form_context(workspace, form, agent)
    if request.htmx:
        return render(request, f"{DETAIL}#agent_form", context)
    # Without JavaScript the dialog is rendered open on the Agents tab.
    context = {**detail_context(workspace, "agents"), **context, "agent_dialog_open": True}
    return render(request, DETAIL, context, status=status)


@require_GET
@vary_on_headers("HX-Request")
def agents_panel(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    if not request.htmx:
        return redirect(_agents_url(workspace.id))
    context = {"workspace": workspace, "agents": selectors.agents_for_workspace(workspace)}
    return render(request, PANEL, context)


@require_GET
@vary_on_headers("HX-Request")
def agent_cli_settings(request, workspace_id: str):
    """The agent dialog's settings for the CLI just picked (`cli_type`), keeping the values
    typed in them (the other parameters)."""
    workspace = get_object_or_404(Workspace, id=workspace_id)
    if not request.htmx:
        return redirect(_agents_url(workspace.id))
    form = AgentForm(initial=request.GET.dict())
    context = _agent_form_context(workspace, form) | {"picking": True}
    return render(request, f"{DETAIL}#agent_cli_settings", context)


@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
def agent_new(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    if request.method == "GET":
        return _form_page(
            request, workspace, AgentForm(initial={"cli_type": selectors.default_cli()})
        )
    form = AgentForm(request.POST)
    if form.is_valid():
        try:
            agent = services.agent_create(workspace=workspace, **form.cleaned_data)
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            return _panel(request, workspace, toast=f"Added {agent.name}", close_dialog=True)
    return _form_page(request, workspace, form, status=INVALID)


@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
def agent_edit(request, agent_id: str):
    agent = get_object_or_404(Agent.objects.select_related("workspace"), id=agent_id)
    workspace = agent.workspace
    if request.method == "GET":
        form = AgentForm(initial=AgentForm.initial_for(agent))
        return _form_page(request, workspace, form, agent)
    form = AgentForm(request.POST)
    if form.is_valid():
        try:
            services.agent_update(agent=agent, **form.cleaned_data)
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            return _panel(request, workspace, toast=f"Saved {agent.name}", close_dialog=True)
    return _form_page(request, workspace, form, agent, status=INVALID)


@require_POST
def agent_delete(request, agent_id: str):
    agent = get_object_or_404(Agent.objects.select_related("workspace"), id=agent_id)
    workspace, name = agent.workspace, agent.name
    chats_agent_delete(agent=agent)
    return _panel(request, workspace, toast=f"Deleted {name}")


@require_POST
def agent_move(request, agent_id: str):
    agent = get_object_or_404(Agent.objects.select_related("workspace"), id=agent_id)
    offset = {"up": -1, "down": 1}.get(request.POST.get("direction", ""), 0)
    order = selectors.order_with_move(agent.workspace, agent.id, offset)
    if order:
        services.agent_reorder(workspace=agent.workspace, agent_ids=order)
    return _panel(request, agent.workspace)


@require_POST
def agents_reorder(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    try:
        services.agent_reorder(workspace=workspace, agent_ids=request.POST.getlist("agent_ids"))
    except ServiceError:
        # The list changed meanwhile (another tab, the Malamar agent): show the current order.
        response = _panel(request, workspace)
        if request.htmx:
            toast_event(response, "The agents changed meanwhile; order not saved.", "error")
        return response
    return _panel(request, workspace)
