import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from malamar_site.transfer import export_json
from workspaces.models import Workspace


class Command(BaseCommand):
    help = (
        "Export a workspace (id or exact title) to one versioned JSON file: settings, agents, "
        "tasks with comments, activity logs and dependencies; chats and attachments on request."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("workspace", help="the workspace's id or exact title")
        parser.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
        parser.add_argument("--chats", action="store_true", help="include the chats")
        parser.add_argument(
            "--attachments", action="store_true", help="include the chats and their files"
        )

    def handle(self, *args, workspace, output, chats, attachments, **options):
        found = self._workspace(workspace)
        text = export_json(found, chats=chats, attachments=attachments)
        if output == "-":
            sys.stdout.write(text + "\n")
            return
        path = Path(output).expanduser()
        try:
            path.write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise CommandError(f"Cannot write {path}: {exc}") from exc
        self.stderr.write(f"Exported “{found.title}” to {path}")

    def _workspace(self, key: str) -> Workspace:
        by_id = Workspace.objects.filter(id=key).first()
        if by_id:
            return by_id
        by_title = list(Workspace.objects.filter(title=key)[:2])
        if len(by_title) == 1:
            return by_title[0]
        if by_title:
            raise CommandError(f"Several workspaces are called “{key}”: use the id")
        raise CommandError(f"No workspace with the id or title “{key}”")
