from django.db import migrations

from core.ids import new_id


def add_first_participants(apps, schema_editor):
    """Every existing chat becomes a chat with one participant: its agent (or Malamar)."""
    Chat = apps.get_model("chats", "Chat")
    ChatParticipant = apps.get_model("chats", "ChatParticipant")
    ChatMessage = apps.get_model("chats", "ChatMessage")
    for chat in Chat.objects.all():
        if not ChatParticipant.objects.filter(chat=chat).exists():
            ChatParticipant.objects.create(
                id=new_id(), chat=chat, agent_id=chat.agent_id, cli_type=chat.cli_type,
                position=0, created_at=chat.created_at,
            )
        name = chat.agent.name if chat.agent_id else "Malamar"
        ChatMessage.objects.filter(chat=chat, role="agent", agent_name="").update(
            agent_id=chat.agent_id, agent_name=name
        )


class Migration(migrations.Migration):
    dependencies = [("chats", "0002_group_chat")]

    operations = [migrations.RunPython(add_first_participants, migrations.RunPython.noop, elidable=True)]
