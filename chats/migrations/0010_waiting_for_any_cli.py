
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('chats', '0009_chat_last_seen'),
    ]

    operations = [
        migrations.AlterField(
            model_name='chatqueueitem',
            name='waiting_for_cli',
            field=models.CharField(blank=True, default='', max_length=40),
        ),
    ]
