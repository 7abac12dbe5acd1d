from django.urls import path

from malamar_site import task_views as views

urlpatterns = [
    path("workspaces/<str:workspace_id>/tasks/", views.board_view, name="task_board"),
    path(
        "workspaces/<str:workspace_id>/tasks/column/<str:status>/",
        views.column_view,
        name="task_column",
    ),
    path("workspaces/<str:workspace_id>/tasks/usage/", views.usage_view, name="task_usage"),
    path("workspaces/<str:workspace_id>/tasks/move/", views.task_move, name="task_move"),
    path("workspaces/<str:workspace_id>/tasks/new/", views.task_create, name="task_create"),
    path(
        "workspaces/<str:workspace_id>/tasks/new/blockers/",
        views.task_create_blockers,
        name="task_create_blockers",
    ),
    path(
        "workspaces/<str:workspace_id>/tasks/delete-done/",
        views.tasks_delete_done,
        name="tasks_delete_done",
    ),
    path("tasks/<str:task_id>/", views.task_detail, name="task_detail"),
    path("tasks/<str:task_id>/move/", views.task_move_choices, name="task_move_choices"),
    path("tasks/<str:task_id>/comments/new/", views.task_comment_add, name="task_comment_add"),
    path("tasks/<str:task_id>/review/", views.task_review, name="task_review"),
    path("tasks/<str:task_id>/drafts/", views.task_draft_add, name="task_draft_add"),
    path(
        "tasks/<str:task_id>/drafts/<str:draft_id>/delete/",
        views.task_draft_delete,
        name="task_draft_delete",
    ),
    path("tasks/<str:task_id>/changes/", views.task_changes, name="task_changes"),
    path("tasks/<str:task_id>/changes/file/", views.task_change_file, name="task_change_file"),
    path(
        "tasks/<str:task_id>/description/edit/",
        views.task_description_edit,
        name="task_description_edit",
    ),
    path("tasks/<str:task_id>/summary/edit/", views.task_summary_edit, name="task_summary_edit"),
    path("tasks/<str:task_id>/status/", views.task_status, name="task_status"),
    path("tasks/<str:task_id>/cancel/", views.task_cancel, name="task_cancel"),
    path("tasks/<str:task_id>/blockers/", views.task_blockers, name="task_blockers"),
    path("tasks/<str:task_id>/prioritize/", views.task_prioritize, name="task_prioritize"),
    path("tasks/<str:task_id>/retry/", views.task_retry, name="task_retry"),
    path("tasks/<str:task_id>/resume/", views.task_resume, name="task_resume"),
    path("tasks/<str:task_id>/checks/run/", views.task_checks_run, name="task_checks_run"),
    path("tasks/<str:task_id>/stop-retrying/", views.task_retries_stop, name="task_retries_stop"),
    path("tasks/<str:task_id>/delete/", views.task_delete, name="task_delete"),
    path("tasks/<str:task_id>/merge/", views.task_branch_merge, name="task_branch_merge"),
    path("tasks/<str:task_id>/discard/", views.task_branch_discard, name="task_branch_discard"),
]
