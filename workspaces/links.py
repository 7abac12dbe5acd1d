"""Links into a workspace page: one place knows the `?tab=…&task=…` / `&chat=…` format
(app.js `itemLink` builds the same links for toasts)."""

from urllib.parse import urlencode

from django.urls import reverse


def workspace_tab_url(workspace_id: str, tab: str, **item) -> str:
    """`/workspaces/<id>/?tab=<tab>`, plus `&task=<id>`, `&chat=<id>`, `&q=<search>`, … for each
    non-empty value given, encoded (a search for `a&b#c` stays one value)."""
    params = {"tab": tab, **{key: value for key, value in item.items() if value}}
    return f"{reverse('workspace_detail', args=[workspace_id])}?{urlencode(params)}"
