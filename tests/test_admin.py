import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client

from agents.models import Agent
from chats.models import Chat, ChatMessage, ChatQueueItem
from core.models import Marker, OutboxEvent, Setting
from runner.models import CliHealth
from tasks.models import Task, TaskComment, TaskDependency, TaskLog, TaskQueueItem
from workspaces.models import Workspace

MODELS = [Workspace, Agent, Task, TaskComment, TaskLog, TaskQueueItem, TaskDependency]
MODELS += [Chat, ChatMessage]
MODELS += [ChatQueueItem, Setting, OutboxEvent, Marker, CliHealth]


def test_every_model_is_registered():
    for model in MODELS:
        assert admin.site.is_registered(model), model


@pytest.mark.parametrize("model", MODELS)
def test_changelists_render(db, task, agents, model):
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
    meta = model._meta
    response = client.get(f"/admin/{meta.app_label}/{meta.model_name}/?q=x")
    assert response.status_code == 200
