from django.contrib import admin

from chats.models import Chat, ChatMessage, ChatQueueItem


@admin.register(Chat)
class ChatAdmin(admin.ModelAdmin):
    list_display = ("title", "workspace", "agent", "cli_type", "updated_at")
    list_filter = ("cli_type", "workspace")
    search_fields = ("title", "id")


@admin.register(ChatMessage)
class ChatMessageAdmin(admin.ModelAdmin):
    list_display = ("chat", "role", "created_at")
    list_filter = ("role",)
    search_fields = ("message", "chat__title")


@admin.register(ChatQueueItem)
class ChatQueueItemAdmin(admin.ModelAdmin):
    list_display = ("chat", "status", "pid", "stop_requested_at", "updated_at")
    list_filter = ("status",)
