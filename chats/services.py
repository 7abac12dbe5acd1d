from django.db import transaction
from django.utils import timezone

from chats.models import Chat, ChatMessage, ChatRole
from core import events


def _chat_payload(chat: Chat) -> dict:
    return {"chat_id": chat.id, "chat_title": chat.title, "workspace_id": chat.workspace_id}


def chat_message_add_system(*, chat: Chat, message: str) -> ChatMessage:
    """A system note in a chat. System messages never start processing."""
    now = timezone.now()
    with transaction.atomic():
        msg = ChatMessage.objects.create(
            chat=chat, role=ChatRole.SYSTEM, message=message, created_at=now
        )
        Chat.objects.filter(id=chat.id).update(updated_at=now)
        events.publish("chat.message_added", {**_chat_payload(chat), "author_type": "system"})
    return msg


def chats_switch_to_malamar(*, agent) -> None:
    """Before an agent is deleted: its chats continue with the Malamar agent."""
    with transaction.atomic():
        for chat in Chat.objects.filter(agent=agent):
            chat_message_add_system(chat=chat, message=f"Switched from {agent.name} to Malamar")
            Chat.objects.filter(id=chat.id).update(agent=None, cli_type=None)
            events.publish("chat.updated", _chat_payload(chat))
