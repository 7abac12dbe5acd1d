"""Links into a workspace page: one place knows the `?tab=…&task=…` / `&chat=…` format
(app.js `itemLink` builds the same links for toasts)."""

import functools
from urllib.parse import urlencode

from django.urls import get_script_prefix, reverse


def workspace_tab_url(workspace_id: str, tab: str, **item) -> str:
    """`/workspaces/<id>/?tab=<tab>`, plus `&task=<id>`, `&chat=<id>`, `&q=<search>`, … for each
    non-empty value given, encoded (a search for `a&b#c` stays one value)."""
    params = {"tab": tab, **{key: value for key, value in item.items() if value}}
    return f"{_workspace_path(get_script_prefix(), workspace_id)}?{urlencode(params)}"


@functools.lru_cache(maxsize=1024)
def _workspace_path(script_prefix: str, workspace_id: str) -> str:
    """Resolved once per workspace (and prefix): a board links every card to its workspace."""
    return reverse("workspace_detail", args=[workspace_id])
