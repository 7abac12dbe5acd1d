"""Migrations on both databases: a column shortened by a migration keeps its rows."""

import pytest
from django.db import connection

from tests.migration_history import migrate_through_originals

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.pg]

# The states just before the migrations that shortened a text column.
BEFORE_SHORTENING = [
    ("agents", "0001_initial"),
    ("chats", "0003_first_participants"),
    ("tasks", "0002_task_comment_kind"),
    ("workspaces", "0003_workspace_notify_inherit"),
]


def test_migrations_that_shorten_a_column_cut_longer_values_first():
    # PostgreSQL refuses to shorten a varchar column while a row is longer (SQLite kept them).
    old = migrate_through_originals(connection, BEFORE_SHORTENING).apps
    workspace = old.get_model("workspaces", "Workspace").objects.create(title="W" * 500)
    old.get_model("agents", "Agent").objects.create(
        workspace_id=workspace.id, name="A" * 200, instruction="x", order=0
    )
    old.get_model("tasks", "Task").objects.create(workspace_id=workspace.id, summary="S" * 3000)
    old.get_model("chats", "Chat").objects.create(workspace_id=workspace.id, title="C" * 500)

    new = migrate_through_originals(connection).apps
    assert new.get_model("workspaces", "Workspace").objects.get().title == "W" * 200
    assert new.get_model("agents", "Agent").objects.get().name == "A" * 100
    assert new.get_model("tasks", "Task").objects.get().summary == "S" * 500
    assert new.get_model("chats", "Chat").objects.get().title == "C" * 200
