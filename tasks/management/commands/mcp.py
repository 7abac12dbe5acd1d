"""`manage.py mcp --workspace ID` (`malamar mcp`): the MCP server for agents, over stdio."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from tasks.mcp_server import serve
from workspaces.models import Workspace


class Command(BaseCommand):
    help = (
        "Serve Malamar's tools to an agent CLI over stdio (Model Context Protocol), acting for "
        "one workspace."
    )

    def add_arguments(self, parser):
        parser.add_argument("--workspace", required=True, help="the workspace's id")

    def handle(self, *args, workspace: str, **options):
        try:
            found = Workspace.objects.filter(id=workspace).exists()
        except DatabaseError as exc:  # no database there yet, or one Malamar never set up
            raise CommandError(
                f"cannot read Malamar's database in {settings.DATA_DIR} ({exc}): run `malamar` "
                "once to set it up, or give --data-dir"
            ) from None
        if not found:
            raise CommandError(f"no workspace with id {workspace!r}")
        serve(workspace)
