from agents.models import Agent
from tasks.models import Task, TaskComment, TaskLog
from tasks.services import comment_author_name


def task_with_counts(task_id: str) -> Task | None:
    return Task.objects.with_counts().filter(id=task_id).first()


def agent_names(workspace_id: str) -> dict[str, str]:
    return dict(Agent.objects.filter(workspace_id=workspace_id).values_list("id", "name"))


def comments_for_task(task: Task) -> list[TaskComment]:
    """Oldest first, each with `author_name` ("(Deleted Agent)" when its agent is gone)."""
    names = agent_names(task.workspace_id)
    comments = list(task.comments.order_by("created_at", "id"))
    for comment in comments:
        comment.author_name = comment_author_name(comment, names)
    return comments


def logs_for_task(task: Task) -> list[TaskLog]:
    return list(task.logs.order_by("created_at", "id"))
