"""On PostgreSQL, a committed outbox insert wakes the event relay (LISTEN malamar_events) at
once (core.migration_steps says how). SQLite has no NOTIFY: its relay keeps polling."""

from django.db import migrations

from core.migration_steps import create_outbox_notify, drop_outbox_notify


class Migration(migrations.Migration):
    dependencies = [("core", "0002_api_tokens")]

    operations = [migrations.RunPython(create_outbox_notify, drop_outbox_notify)]
