import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.test import Client

from agents.models import Agent
from chats.models import Chat, ChatMessage, ChatQueueItem
from core.models import Marker, OutboxEvent, Setting
from runner.models import CliHealth
from tasks.models import Task, TaskComment, TaskDependency, TaskLog, TaskQueueItem
from tests.htmltree import parse
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


SEARCHABLE = [model for model in MODELS if admin.site.get_model_admin(model).search_fields]


@pytest.mark.pg
@pytest.mark.parametrize("model", SEARCHABLE)
def test_a_search_of_thousands_of_words_finds_nothing_and_says_why(db, task, agents, model):
    # every word is a LIKE over every search field: SQLite refused the expression (a 500)
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "a@example.com", "pw"))
    meta = model._meta
    url = f"/admin/{meta.app_label}/{meta.model_name}/"
    response = client.get(url, {"q": "a b " * 5000})
    assert response.status_code == 200
    messages = parse(response.content.decode()).find("messagelist").find_all(tag="li")
    assert "Search for at most 20 words and 1000 characters." in [m.text for m in messages]
    assert response.context["cl"].result_count == 0
    assert client.get(url, {"q": "x" * 60_000}).status_code == 200
