"""Chats pages (htmx fragments). Thin: parse → service → fragment."""


def chat_tab_context(request, workspace) -> dict:
    """Extra context for the workspace detail page when the chats tab is shown."""
    return {}
