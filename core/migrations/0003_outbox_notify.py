"""On PostgreSQL, a committed outbox insert wakes the event relay (LISTEN malamar_events) at
once: NOTIFY is delivered on commit only, like the row itself, so the relay needs no fast poll
(idle cost) and adds no delay. A statement trigger costs the publishers no round trip. SQLite
has no NOTIFY: its relay keeps polling."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION malamar_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('malamar_events', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER event_outbox_notify AFTER INSERT ON event_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION malamar_outbox_notify();
"""
DROP = """
DROP TRIGGER IF EXISTS event_outbox_notify ON event_outbox;
DROP FUNCTION IF EXISTS malamar_outbox_notify();
"""


def _on_postgres(sql: str):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [("core", "0002_api_tokens")]

    operations = [migrations.RunPython(_on_postgres(CREATE), _on_postgres(DROP))]
