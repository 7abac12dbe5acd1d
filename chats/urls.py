from django.urls import path

from chats import views

urlpatterns = [
    path("workspaces/<str:workspace_id>/chats/", views.chat_list, name="chat_list"),
    path("workspaces/<str:workspace_id>/chats/menu/", views.chat_new_menu, name="chat_new_menu"),
    path("workspaces/<str:workspace_id>/chats/new/", views.chat_new, name="chat_new"),
    path("chats/<str:chat_id>/", views.chat_popup, name="chat_popup"),
    path("chats/<str:chat_id>/rename/", views.chat_rename, name="chat_rename"),
    path("chats/<str:chat_id>/agent/", views.chat_agent, name="chat_agent"),
    path("chats/<str:chat_id>/cli/", views.chat_cli, name="chat_cli"),
    path("chats/<str:chat_id>/send/", views.chat_send, name="chat_send"),
    path("chats/<str:chat_id>/stop/", views.chat_stop, name="chat_stop"),
    path("chats/<str:chat_id>/attachments/", views.chat_upload, name="chat_upload"),
    path("chats/<str:chat_id>/delete/", views.chat_delete, name="chat_delete"),
    path("chats/<str:chat_id>/participants/", views.participant_add, name="chat_participant_add"),
    path(
        "chats/<str:chat_id>/participants/<str:participant_id>/toggle/",
        views.participant_toggle,
        name="chat_participant_toggle",
    ),
    path(
        "chats/<str:chat_id>/participants/<str:participant_id>/remove/",
        views.participant_remove,
        name="chat_participant_remove",
    ),
    path(
        "chats/<str:chat_id>/messages/<str:message_id>/included/",
        views.message_include,
        name="chat_message_include",
    ),
]
