from datetime import datetime
from typing import Any

from ninja import File, Router, Schema, Status, UploadedFile
from pydantic import ConfigDict, Field

from chats import selectors, services
from chats.models import Chat, ChatMessage, ChatParticipant
from chats.services import TITLE_MAX_LENGTH
from core.errors import NotFound
from core.lookups import get_or_404
from workspaces.models import Workspace

router = Router(tags=["chats"])


class ChatOut(Schema):
    id: str
    workspace_id: str
    agent_id: str | None
    agent_name: str
    cli_type: str | None
    effective_cli_type: str | None
    title: str
    is_processing: bool
    last_message_preview: str
    last_activity_at: datetime
    last_seen_at: datetime = Field(
        description="When you last looked at it: replies after this are in GET /api/needs-you."
    )
    created_at: datetime
    updated_at: datetime


class ChatMessageOut(Schema):
    id: str
    chat_id: str
    role: str
    message: str
    actions: list[Any] | None
    agent_id: str | None
    agent_name: str
    included: bool
    created_at: datetime


class ParticipantOut(Schema):
    id: str
    agent_id: str | None
    agent_name: str
    cli_type: str | None
    effective_cli_type: str | None
    enabled: bool
    position: int


class ChatDetailOut(ChatOut):
    messages: list[ChatMessageOut]
    participants: list[ParticipantOut]

    @staticmethod
    def resolve_messages(obj):
        return obj.message_list

    @staticmethod
    def resolve_participants(obj):
        return obj.participant_list


class ParticipantCreate(Schema):
    model_config = ConfigDict(extra="forbid")

    agent_id: str | None = None
    cli_type: str | None = None


class ParticipantUpdate(Schema):
    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = None
    cli_type: str | None = None


class MessageUpdate(Schema):
    model_config = ConfigDict(extra="forbid")

    included: bool


class ChatList(Schema):
    chats: list[ChatOut]


class ChatMessageList(Schema):
    messages: list[ChatMessageOut]


class ChatCreate(Schema):
    model_config = ConfigDict(extra="forbid")

    agent_id: str | None = None
    title: str | None = Field(None, max_length=TITLE_MAX_LENGTH)


class ChatUpdate(Schema):
    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, max_length=TITLE_MAX_LENGTH)
    agent_id: str | None = None
    cli_type: str | None = None


class ChatMessageCreate(Schema):
    model_config = ConfigDict(extra="forbid")

    message: str


def _summary(chat_id: str) -> Chat:
    chat = selectors.chat_summary(chat_id)
    if chat is None:
        raise NotFound("Chat not found")
    return chat


@router.get("/workspaces/{workspace_id}/chats", response=ChatList)
def list_chats(request, workspace_id: str, q: str = ""):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    return {"chats": selectors.chats_for_workspace(workspace.id, q)}


@router.post("/workspaces/{workspace_id}/chats", response={201: ChatOut})
def create_chat(request, workspace_id: str, payload: ChatCreate):
    workspace = get_or_404(Workspace, workspace_id, "Workspace")
    agent = services.chat_agent_resolve(workspace_id=workspace.id, agent_id=payload.agent_id)
    chat = services.chat_create(workspace=workspace, agent=agent, title=payload.title)
    return Status(201, _summary(chat.id))


@router.get("/chats/{chat_id}", response=ChatDetailOut)
def get_chat(request, chat_id: str):
    chat = selectors.chat_detail(chat_id)
    if chat is None:
        raise NotFound("Chat not found")
    return chat


@router.put("/chats/{chat_id}", response=ChatOut)
def update_chat(request, chat_id: str, payload: ChatUpdate):
    """Any of `title`, `agent_id` (null = Malamar), `cli_type` (null = no override)."""
    chat = get_or_404(Chat, chat_id, "Chat")
    services.chat_update(chat=chat, **payload.model_dump(exclude_unset=True))
    return _summary(chat_id)


@router.delete("/chats/{chat_id}", response={204: None})
def delete_chat(request, chat_id: str):
    services.chat_delete(chat=get_or_404(Chat, chat_id, "Chat"))
    return Status(204, None)


@router.post("/chats/{chat_id}/messages", response={201: ChatMessageOut})
def send_message(request, chat_id: str, payload: ChatMessageCreate):
    chat = get_or_404(Chat, chat_id, "Chat")
    return Status(201, services.chat_message_send(chat=chat, message=payload.message))


@router.post("/chats/{chat_id}/seen", response=ChatOut)
def mark_chat_seen(request, chat_id: str):
    """You read the chat: its replies so far leave GET /api/needs-you (opening it in the app
    does the same)."""
    services.chat_seen(chat=get_or_404(Chat, chat_id, "Chat"))
    return _summary(chat_id)


@router.post("/chats/{chat_id}/cancel", response=ChatOut)
def cancel_chat(request, chat_id: str):
    services.chat_cancel(chat=get_or_404(Chat, chat_id, "Chat"))
    return _summary(chat_id)


@router.post("/chats/{chat_id}/attachments", response={201: ChatMessageList})
def upload_attachments(request, chat_id: str, files: File[list[UploadedFile]]):
    """multipart/form-data with one or more files under the field name `files`."""
    chat = get_or_404(Chat, chat_id, "Chat")
    return Status(201, {"messages": services.chat_attachments_add(chat=chat, files=files)})


def _participant(chat_id: str, participant_id: str):
    participant = ChatParticipant.objects.filter(id=participant_id, chat_id=chat_id).first()
    if participant is None:
        raise NotFound("Participant not found")
    return participant


@router.post("/chats/{chat_id}/participants", response={201: ChatDetailOut})
def add_participant(request, chat_id: str, payload: ParticipantCreate):
    chat = get_or_404(Chat, chat_id, "Chat")
    services.chat_participant_add(chat=chat, **payload.model_dump())
    return Status(201, selectors.chat_detail(chat_id))


@router.put("/chats/{chat_id}/participants/{participant_id}", response=ChatDetailOut)
def update_participant(request, chat_id: str, participant_id: str, payload: ParticipantUpdate):
    participant = _participant(chat_id, participant_id)
    services.chat_participant_update(
        participant=participant, **payload.model_dump(exclude_unset=True)
    )
    return selectors.chat_detail(chat_id)


@router.delete("/chats/{chat_id}/participants/{participant_id}", response=ChatDetailOut)
def remove_participant(request, chat_id: str, participant_id: str):
    services.chat_participant_remove(participant=_participant(chat_id, participant_id))
    return selectors.chat_detail(chat_id)


@router.put("/chats/{chat_id}/messages/{message_id}", response=ChatMessageOut)
def update_message(request, chat_id: str, message_id: str, payload: MessageUpdate):
    message = ChatMessage.objects.filter(id=message_id, chat_id=chat_id).first()
    if message is None:
        raise NotFound("Message not found")
    return services.chat_message_set_included(message=message, included=payload.included)
