"""The JSON API under /api/ (django-ninja; OpenAPI at /api/docs): every app's router."""

from agents.api import router as agents_router
from chats.api import router as chats_router
from core.api import api_create
from core.version import VERSION
from malamar_site.needs_you_api import router as needs_you_router
from malamar_site.settings_api import router as settings_router
from runner.api import router as runs_router
from tasks.api import router as tasks_router
from workspaces.api import router as workspaces_router

api = api_create(
    title="Malamar API",
    version=VERSION,
    description=(
        "Workspaces, agents, tasks, comments, chats, settings and health of a Malamar server."
    ),
    urls_namespace="api",
)
api.add_router("", workspaces_router)
api.add_router("", agents_router)
api.add_router("", tasks_router)
api.add_router("", chats_router)
api.add_router("", runs_router)
api.add_router("", settings_router)
api.add_router("", needs_you_router)
