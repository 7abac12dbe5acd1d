from django.db import models

from core.ids import ID_LENGTH, new_id


def id_field() -> models.CharField:
    """A 21-character nanoid primary key."""
    return models.CharField(primary_key=True, max_length=ID_LENGTH, default=new_id, editable=False)


def choices_check(field: str, choices) -> models.CheckConstraint:
    """Keep enum columns honest in the database, not only in forms."""
    return models.CheckConstraint(
        condition=models.Q(**{f"{field}__in": [value for value, _ in choices]}),
        name=f"%(app_label)s_%(class)s_{field}_valid",
    )
