from django.db import migrations

from core.ids import new_id


def add_missing_participants(apps, schema_editor):
    """Before Chat.agent / Chat.cli_type go: every chat without a participant row gets one
    made from them (its agent or Malamar, with its CLI override)."""
    Chat = apps.get_model("chats", "Chat")
    ChatParticipant = apps.get_model("chats", "ChatParticipant")
    missing = Chat.objects.filter(participants__isnull=True)
    ChatParticipant.objects.bulk_create(
        ChatParticipant(
            id=new_id(),
            chat_id=chat.id,
            agent_id=chat.agent_id,
            cli_type=chat.cli_type,
            position=0,
            created_at=chat.created_at,
        )
        for chat in missing.iterator()
    )


class Migration(migrations.Migration):
    dependencies = [("chats", "0005_usage_limits")]

    # A data migration alone: PostgreSQL refuses to alter a table in the transaction that
    # just wrote rows referencing it, so the fields are removed in the next migration.
    operations = [migrations.RunPython(add_missing_participants, migrations.RunPython.noop, elidable=True)]
