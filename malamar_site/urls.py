from django.contrib import admin
from django.urls import include, path

from core import login, sse
from malamar_site import agent_views, needs_you_views, settings_views, workspace_views
from malamar_site.api import api

pages = [
    path("", workspace_views.workspace_list, name="home"),
    path("workspaces/new/", workspace_views.workspace_create, name="workspace_create"),
    path("workspaces/import/", workspace_views.workspace_import, name="workspace_import"),
    path("first-run/dismiss/", workspace_views.first_run_dismiss, name="first_run_dismiss"),
    path(
        "workspaces/<str:workspace_id>/", workspace_views.workspace_detail, name="workspace_detail"
    ),
    path(
        "workspaces/<str:workspace_id>/header/",
        workspace_views.workspace_header,
        name="workspace_header",
    ),
    path(
        "workspaces/<str:workspace_id>/banners/",
        workspace_views.workspace_banners,
        name="workspace_banners",
    ),
    path(
        "workspaces/<str:workspace_id>/settings/",
        workspace_views.workspace_settings,
        name="workspace_settings",
    ),
    path(
        "workspaces/<str:workspace_id>/settings/path-check/",
        workspace_views.workspace_path_check,
        name="workspace_path_check",
    ),
    path(
        "workspaces/<str:workspace_id>/export/",
        workspace_views.workspace_export,
        name="workspace_export",
    ),
    path(
        "workspaces/<str:workspace_id>/clone/",
        workspace_views.workspace_clone,
        name="workspace_clone",
    ),
    path(
        "workspaces/<str:workspace_id>/delete/",
        workspace_views.workspace_delete,
        name="workspace_delete",
    ),
    path("workspaces/<str:workspace_id>/agents/", agent_views.agents_panel, name="agents_panel"),
    path("workspaces/<str:workspace_id>/agents/new/", agent_views.agent_new, name="agent_new"),
    path(
        "workspaces/<str:workspace_id>/agents/cli-settings/",
        agent_views.agent_cli_settings,
        name="agent_cli_settings",
    ),
    path(
        "workspaces/<str:workspace_id>/agents/reorder/",
        agent_views.agents_reorder,
        name="agents_reorder",
    ),
    path("agents/<str:agent_id>/edit/", agent_views.agent_edit, name="agent_edit"),
    path("agents/<str:agent_id>/delete/", agent_views.agent_delete, name="agent_delete"),
    path("agents/<str:agent_id>/move/", agent_views.agent_move, name="agent_move"),
    path("needs-you/", needs_you_views.needs_you_page, name="needs_you"),
    path(
        "needs-you/tasks/<str:task_id>/review/",
        needs_you_views.needs_you_review,
        name="needs_you_review",
    ),
    path(
        "needs-you/tasks/<str:task_id>/retry/",
        needs_you_views.needs_you_retry,
        name="needs_you_retry",
    ),
    path(
        "needs-you/chats/<str:chat_id>/seen/",
        needs_you_views.needs_you_chat_seen,
        name="needs_you_chat_seen",
    ),
    path("", include("malamar_site.task_urls")),
    path("", include("chats.urls")),
    path("", include("runner.urls")),
    path("settings/", settings_views.global_settings, name="global_settings"),
    path("settings/cli-warning/", settings_views.cli_warning, name="cli_warning"),
    path("settings/clis/refresh/", settings_views.cli_refresh, name="cli_refresh"),
    path(
        "settings/clis/<str:cli_type>/", settings_views.cli_settings_save, name="cli_settings_save"
    ),
    path("settings/clis/<str:cli_type>/status/", settings_views.cli_status, name="cli_status"),
    path("settings/clis/<str:cli_type>/test/", settings_views.cli_test, name="cli_test"),
    path("settings/clis/<str:cli_type>/env-row/", settings_views.cli_env_row, name="cli_env_row"),
]

urlpatterns = [
    *pages,
    path("settings/notifications/", settings_views.notifications_save, name="notifications_save"),
    path(
        "settings/notifications/test/", settings_views.notifications_test, name="notifications_test"
    ),
    path("settings/tokens/", settings_views.token_create, name="token_create"),
    path(
        "settings/tokens/<str:token_id>/revoke/", settings_views.token_revoke, name="token_revoke"
    ),
    path("login/", login.login_view, name="login"),
    path("logout/", login.logout_view, name="logout"),
    path("api/events", sse.events, name="events"),
    path("api/", api.urls),
    path("admin/", admin.site.urls),
]

handler400 = "core.views.bad_request"
handler403 = "core.views.forbidden"
handler404 = "core.views.not_found"
handler500 = "core.views.server_error"
