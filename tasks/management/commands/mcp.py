"""`manage.py mcp --workspace ID` (`malamar mcp`): the MCP server for agents, over stdio."""

from django.core.management.base import BaseCommand, CommandError

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
        if not Workspace.objects.filter(id=workspace).exists():
            raise CommandError(f"no workspace with id {workspace!r}")
        serve(workspace)
