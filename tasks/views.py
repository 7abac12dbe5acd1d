"""Tasks pages (htmx fragments). Thin: parse → service → fragment."""


def task_tab_context(request, workspace) -> dict:
    """Extra context for the workspace detail page when the tasks tab is shown."""
    return {}
