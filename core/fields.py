from django.db import models

from core.ids import ID_LENGTH, new_id


def id_field() -> models.CharField:
    """A 21-character nanoid primary key."""
    return models.CharField(primary_key=True, max_length=ID_LENGTH, default=new_id, editable=False)


def max_length_of(model, field: str) -> int:
    """A text field's limit, read from the model: forms, API schemas and services use this."""
    return model._meta.get_field(field).max_length


def own_fields(model, *, skip=()) -> tuple[str, ...]:
    """A model's concrete fields that are not relations, minus `skip`: what an export or a copy
    carries, fields added later included."""
    return tuple(
        f.name for f in model._meta.concrete_fields if not f.is_relation and f.name not in skip
    )


def icontains_search(queryset, field: str, query: str | None):
    """Rows whose `field` contains `query` (case-insensitive); an empty query filters nothing.

    A query no stored value can contain (longer than the field allows, or with a NUL
    character, which writes refuse) matches nothing without asking the database: SQLite
    refuses LIKE patterns over 50,000 bytes and PostgreSQL refuses NUL characters.
    """
    query = (query or "").strip()
    if not query:
        return queryset
    if "\x00" in query or len(query) > max_length_of(queryset.model, field):
        return queryset.none()
    return queryset.filter(**{f"{field}__icontains": query})


def choices_check(field: str, choices) -> models.CheckConstraint:
    """Keep enum columns honest in the database, not only in forms."""
    return models.CheckConstraint(
        condition=models.Q(**{f"{field}__in": [value for value, _ in choices]}),
        name=f"%(app_label)s_%(class)s_{field}_valid",
    )
