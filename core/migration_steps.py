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
