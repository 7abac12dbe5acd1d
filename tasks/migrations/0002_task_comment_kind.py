"""Store what each task comment is (`kind`: user | agent | system | error).

Existing rows: a comment with a user id is "user", with an agent id "agent". A system comment
(neither) becomes "error" when its text starts with one of the messages the worker wrote for a
failed run before this column existed (ERROR_PREFIXES below); every other system comment (e.g.
"Task cancelled by user") stays "system". From now on the services set `kind` when they write a
comment; nothing reads a comment's text to decide what it is.
"""

from django.db import migrations, models
from django.db.models import Q

# The failed-run messages of runner/execution.py, runner/files.py (working directory) and
# runner/task_loop.py (internal error) as of this migration.
ERROR_PREFIXES = (
    "CLI could not be started:",
    "CLI exited with code ",
    "CLI reported an error:",
    "CLI output could not be read:",
    "CLI completed but output file was not created at ",
    "CLI completed but output file was empty",
    "CLI output was not valid JSON",
    "CLI output structure was invalid:",
    "CLI produced no output for ",
    "Unknown CLI type ",
    "Working directory ",
    "Malamar hit an internal error (",
)


def set_kinds(apps, schema_editor):
    TaskComment = apps.get_model("tasks", "TaskComment")
    rows = TaskComment.objects.all()
    rows.filter(user_id__isnull=False).update(kind="user")
    rows.filter(user_id__isnull=True, agent_id__isnull=False).update(kind="agent")
    system = rows.filter(user_id__isnull=True, agent_id__isnull=True)
    errors = Q()
    for prefix in ERROR_PREFIXES:
        errors |= Q(content__startswith=prefix)
    system.filter(errors).update(kind="error")
    system.exclude(errors).update(kind="system")


class Migration(migrations.Migration):
    dependencies = [
        ("tasks", "0001_initial"),
        ("workspaces", "0002_workspace_stall_kill_minutes"),
    ]

    operations = [
        migrations.AddField(
            model_name="taskcomment",
            name="kind",
            field=models.CharField(
                choices=[
                    ("user", "User"),
                    ("agent", "Agent"),
                    ("system", "System"),
                    ("error", "Error"),
                ],
                default="system",
                max_length=10,
            ),
            preserve_default=False,
        ),
        migrations.RunPython(set_kinds, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="taskcomment",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["user", "agent", "system", "error"])),
                name="tasks_taskcomment_kind_valid",
            ),
        ),
    ]
