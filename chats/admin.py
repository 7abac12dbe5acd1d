from django.contrib import admin

from chats.models import Chat, ChatMessage, ChatParticipant, ChatQueueItem
from chats.selectors import MALAMAR_NAME
from core.admin_site import SearchLimitedAdmin


class ChatParticipantInline(admin.TabularInline):
    model = ChatParticipant
    fields = ("position", "agent", "cli_type", "enabled")
    ordering = ("position", "created_at")
    extra = 0


@admin.register(Chat)
class ChatAdmin(SearchLimitedAdmin):
    list_display = ("title", "workspace", "lead_agent", "lead_cli_type", "updated_at")
    list_filter = ("workspace",)
    search_fields = ("title", "id")
    inlines = (ChatParticipantInline,)

    def get_queryset(self, request):
        return super().get_queryset(request).with_lead()

    @admin.display(description="Agent")
    def lead_agent(self, chat: Chat) -> str:
        return chat.lead_agent_name or MALAMAR_NAME

    @admin.display(description="CLI override")
    def lead_cli_type(self, chat: Chat) -> str:
        return chat.lead_cli_type or "-"


@admin.register(ChatMessage)
class ChatMessageAdmin(SearchLimitedAdmin):
    list_display = ("chat", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("message", "chat__title")


@admin.register(ChatQueueItem)
class ChatQueueItemAdmin(SearchLimitedAdmin):
    list_display = ("chat", "status", "pid", "stop_requested_at", "updated_at")
    list_filter = ("status",)
