"""`{% tab_url workspace.id "chat" chat=chat.id %}`: workspace tab links in templates, encoded by
the one helper that builds them (workspaces.links)."""

from django import template

from workspaces.links import workspace_tab_url

register = template.Library()


@register.simple_tag
def tab_url(workspace_id: str, tab: str, **params) -> str:
    return workspace_tab_url(workspace_id, tab, **params)
