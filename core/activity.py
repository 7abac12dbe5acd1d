from django.utils import timezone


def workspace_touch(workspace_id: str, *, now=None) -> None:
    """Bump the workspace's last activity; call inside the transaction of the change."""
    from workspaces.models import Workspace

    Workspace.objects.filter(id=workspace_id).update(last_activity_at=now or timezone.now())
