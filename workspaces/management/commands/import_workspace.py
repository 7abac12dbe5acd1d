from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from core.errors import ServiceError
from tasks.selectors import paused_count
from workspaces.services import workspace_import
from workspaces.transfer_format import parse_document


class Command(BaseCommand):
    help = (
        "Create a workspace anew from an export file (new ids, references remapped). A broken "
        "file or one from a newer Malamar is refused and nothing is imported."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("file", help="a file written by `malamar export`")
        parser.add_argument("--title", help="a title for the new workspace")

    def handle(self, *args, file, title, **options):
        path = Path(file).expanduser()
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc}") from exc
        try:
            workspace = workspace_import(document=parse_document(raw), title=title)
        except ServiceError as exc:
            raise CommandError(f"Nothing was imported: {exc.message}") from exc
        paused = paused_count(workspace.id)
        self.stdout.write(f"Imported “{workspace.title}” as workspace {workspace.id}")
        if paused:
            self.stdout.write(
                f"Its {paused} task(s) start paused: resume them on the board, or with "
                f"POST /api/workspaces/{workspace.id}/tasks/resume"
            )
