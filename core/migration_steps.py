"""Steps shared by migrations."""

from django.db import migrations
from django.db.models.functions import Length, Substr


def cut_longer_values(app_label: str, model_name: str, field: str, max_length: int):
    """A step before an AlterField that gives `field` a shorter max_length: values longer than
    it are cut to it. PostgreSQL refuses to shorten a column while a row holds more (SQLite
    never checked, so a database that started there can hold longer ones)."""

    def cut(apps, schema_editor):
        model = apps.get_model(app_label, model_name)
        rows = model.objects.using(schema_editor.connection.alias)
        longer = rows.annotate(_length=Length(field)).filter(_length__gt=max_length)
        longer.update(**{field: Substr(field, 1, max_length)})

    return migrations.RunPython(cut, migrations.RunPython.noop, elidable=True)


# On PostgreSQL, a committed outbox insert wakes the event relay (LISTEN malamar_events) at once:
# NOTIFY is delivered on commit only, like the row itself, so the relay needs no fast poll (idle
# cost) and adds no delay. A statement trigger costs the publishers no round trip. SQLite has no
# NOTIFY: the committing process wakes its relay (core.wake). Core's migration 0003 and its
# squashed form create it.
OUTBOX_NOTIFY_CREATE = """
CREATE OR REPLACE FUNCTION malamar_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('malamar_events', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER event_outbox_notify AFTER INSERT ON event_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION malamar_outbox_notify();
"""
OUTBOX_NOTIFY_DROP = """
DROP TRIGGER IF EXISTS event_outbox_notify ON event_outbox;
DROP FUNCTION IF EXISTS malamar_outbox_notify();
"""


def create_outbox_notify(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(OUTBOX_NOTIFY_CREATE)


def drop_outbox_notify(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(OUTBOX_NOTIFY_DROP)
