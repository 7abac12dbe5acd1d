"""Kept only for runner/task_loop.py until the run pipeline lands: use
workspaces.services.workspace_touch (core knows no app, hence the model looked up by name)."""

from django.apps import apps
from django.utils import timezone


def workspace_touch(workspace_id: str, *, now=None) -> None:
    workspace = apps.get_model("workspaces", "Workspace")
    workspace.objects.filter(id=workspace_id).update(last_activity_at=now or timezone.now())
