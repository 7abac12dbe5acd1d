"""Workspace pages: list (home), detail with tabs, settings. Thin: parse → service → fragment."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from core.errors import ServiceError
from core.forms import apply_service_error
from core.htmx import toast
from tasks.selectors import paused_count, unmerged_branch_tasks
from workspaces import selectors, services
from workspaces.api import export_response
from workspaces.forms import WorkspaceCreateForm, WorkspaceDeleteForm, WorkspaceSettingsForm
from workspaces.models import Workspace
from workspaces.pages import DETAIL, INVALID, TABS, detail_context, workspace_page_context
from workspaces.transfer_format import parse_document

# Fragments with validation errors answer 200 (browsers log every 4xx XHR as a console error);
# plain form posts without JavaScript get 422 with the whole page.
LIST = "workspaces/list.html"
SETTINGS = "workspaces/settings.html"


def _targets(request, target: str) -> bool:
    return bool(request.htmx) and request.htmx.target == target


def _client_redirect(request, url: str):
    return HttpResponseClientRedirect(url) if request.htmx else redirect(url)


# --- list -------------------------------------------------------------------------------


def _list_context(query: str, form=None) -> dict:
    return {
        "workspaces": selectors.workspace_cards(query),
        "total": selectors.workspace_count(),
        "q": query,
        "form": form or WorkspaceCreateForm(),
        "checklist": selectors.first_run_checklist(),
    }


@require_GET
@vary_on_headers("HX-Request", "HX-Target")
def workspace_list(request):
    query = request.GET.get("q", "").strip()
    if _targets(request, "first-run"):
        return render(request, f"{LIST}#first_run", {"checklist": selectors.first_run_checklist()})
    context = _list_context(query)
    if _targets(request, "workspace-results"):
        return render(request, f"{LIST}#results", context)
    return render(request, LIST, context)


@require_POST
def first_run_dismiss(request):
    services.first_run_checklist_dismiss()
    if request.htmx:
        return render(request, f"{LIST}#first_run", {"checklist": None})
    return redirect("home")


@require_POST
def workspace_create(request):
    form = WorkspaceCreateForm(request.POST)
    if form.is_valid():
        try:
            workspace = services.workspace_create(**form.cleaned_data)
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            return _client_redirect(request, reverse("workspace_detail", args=[workspace.id]))
    if request.htmx:
        return render(request, f"{LIST}#create_form", {"form": form})
    context = {**_list_context(""), "form": form, "create_open": True}
    return render(request, LIST, context, status=INVALID)


# --- detail -----------------------------------------------------------------------------


@require_GET
@vary_on_headers("HX-Request", "HX-Target")
def workspace_detail(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    tab = request.GET.get("tab", "tasks")
    tab = tab if tab in TABS else "tasks"
    context = workspace_page_context(request, workspace, tab)
    if _targets(request, "workspace-tabs"):
        return render(request, f"{DETAIL}#tabs", context)
    return render(request, DETAIL, context)


@require_GET
def workspace_banners(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    return render(request, f"{DETAIL}#banners", detail_context(workspace, "agents"))


@require_GET
def workspace_header(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    return render(request, f"{DETAIL}#header", {"workspace": workspace})


# --- settings ---------------------------------------------------------------------------


def _settings_context(workspace: Workspace, form, delete_form=None) -> dict:
    return {
        "workspace": workspace,
        "form": form,
        "delete_form": delete_form or WorkspaceDeleteForm(workspace=workspace),
        # The delete's confirmation names the branches whose work was never merged.
        "unmerged": unmerged_branch_tasks(workspace.tasks.all()),
        "path_warning": selectors.directory_warning(
            form["working_directory_mode"].value(), form["working_directory_path"].value()
        ),
    }


@require_http_methods(["GET", "POST"])
@vary_on_headers("HX-Request")
def workspace_settings(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    if request.method == "GET":
        form = WorkspaceSettingsForm.for_workspace(workspace)
        return render(request, SETTINGS, _settings_context(workspace, form))
    form = WorkspaceSettingsForm(request.POST)
    saved = False
    if form.is_valid():
        try:
            services.workspace_update(workspace=workspace, **form.cleaned_data)
        except ServiceError as error:
            apply_service_error(form, error)
        else:
            saved = True
    if not request.htmx:
        if saved:
            messages.success(request, "Settings saved")
            return redirect("workspace_settings", workspace_id=workspace.id)
        return render(request, SETTINGS, _settings_context(workspace, form), status=INVALID)
    if saved:
        form = WorkspaceSettingsForm.for_workspace(workspace)
    context = _settings_context(workspace, form)
    response = render(request, f"{SETTINGS}#settings_form", context)
    if saved:
        toast(response, "Settings saved", "success")
        trigger_client_event(response, "malamar:workspace-saved", {})
    return response


@require_GET
def workspace_path_check(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    warning = selectors.directory_warning(
        request.GET.get("working_directory_mode"), request.GET.get("working_directory_path")
    )
    context = {"workspace": workspace, "path_warning": warning}
    return render(request, f"{SETTINGS}#path_warning", context)


@require_POST
def workspace_delete(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    form = WorkspaceDeleteForm(request.POST, workspace=workspace)
    if form.is_valid():
        title = workspace.title
        # Typing the name confirms it all, unmerged branches included.
        services.workspace_delete(workspace=workspace, confirm_unmerged=True)
        messages.success(request, f"Deleted “{title}”")
        return _client_redirect(request, reverse("home"))
    if request.htmx:
        unmerged = unmerged_branch_tasks(workspace.tasks.all())
        context = {"workspace": workspace, "delete_form": form, "unmerged": unmerged}
        return render(request, f"{SETTINGS}#delete_form", context)
    settings_form = WorkspaceSettingsForm.for_workspace(workspace)
    context = {**_settings_context(workspace, settings_form, form), "delete_open": True}
    return render(request, SETTINGS, context, status=INVALID)


# --- export, import, clone ------------------------------------------------------------------


@require_GET
def workspace_export(request, workspace_id: str):
    """Download the workspace as one JSON file (chats and attachments when ticked)."""
    workspace = get_object_or_404(Workspace, id=workspace_id)
    attachments = request.GET.get("attachments") == "1"
    chats = attachments or request.GET.get("chats") == "1"
    return export_response(workspace, chats=chats, attachments=attachments)


@require_POST
def workspace_clone(request, workspace_id: str):
    workspace = get_object_or_404(Workspace, id=workspace_id)
    try:
        clone = services.workspace_clone(
            workspace=workspace, title=request.POST.get("title", "").strip() or None
        )
    except ServiceError as error:
        messages.error(request, error.message)
        return redirect("workspace_settings", workspace_id=workspace.id)
    messages.success(request, f"Cloned into “{clone.title}” (settings and agents)")
    return redirect("workspace_settings", workspace_id=clone.id)


def imported_message(workspace: Workspace) -> str:
    paused = paused_count(workspace.id)
    if not paused:
        return f"Imported “{workspace.title}”"
    tasks = f"{paused} task{'s' if paused != 1 else ''}"
    return f"Imported “{workspace.title}”: its {tasks} wait, paused, until you resume them"


@require_POST
def workspace_import(request):
    """Create a workspace from an uploaded export file (a plain multipart form post)."""
    upload = request.FILES.get("file")
    if upload is None:
        messages.error(request, "Choose an export file to import")
        return redirect("home")
    try:
        workspace = services.workspace_import(document=parse_document(upload.read()))
    except ServiceError as error:
        messages.error(request, f"Nothing was imported: {error.message}")
        return redirect("home")
    messages.success(request, imported_message(workspace))
    return redirect("workspace_detail", workspace_id=workspace.id)
