from django.db import migrations, models
from django.db.models import F


def comments_so_far_were_delivered(apps, schema_editor):
    """Comments written before delivery was tracked: agents saw them (or the task is past
    them); none may send its task around again."""
    TaskComment = apps.get_model("tasks", "TaskComment")
    TaskComment.objects.filter(delivered_at__isnull=True).update(delivered_at=F("created_at"))


class Migration(migrations.Migration):
    dependencies = [
        ("tasks", "0008_review_verdicts"),
    ]

    operations = [
        migrations.AddField(
            model_name="taskcomment",
            name="delivered_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(comments_so_far_were_delivered, migrations.RunPython.noop, elidable=True),
        migrations.AlterField(
            model_name="taskqueueitem",
            name="waiting_for_cli",
            field=models.CharField(blank=True, default="", max_length=40),
        ),
    ]
