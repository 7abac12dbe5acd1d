"""Workspace notification switches become "inherit" | "on" | "off" (were booleans).

They used to be copied from the global default when a workspace was created, so a value equal
to today's global default is what the workspace got without a choice of its own: it becomes
"inherit" (and follows the global switch from now on). A value that differs from the global
default was set on purpose and is kept as "on" or "off".
"""

from django.db import migrations, models


KEYS = ("notify_on_error", "notify_on_in_review")
CHOICES = [("inherit", "Inherit"), ("on", "On"), ("off", "Off")]


def _global_defaults(apps) -> dict:
    Setting = apps.get_model("core", "Setting")
    stored = dict(Setting.objects.filter(key__in=KEYS).values_list("key", "value"))
    # settings_store.DEFAULTS: both on unless the user saved otherwise.
    return {key: stored.get(key) if isinstance(stored.get(key), bool) else True for key in KEYS}


def to_choices(apps, schema_editor):
    Workspace = apps.get_model("workspaces", "Workspace")
    defaults = _global_defaults(apps)
    for key in KEYS:
        for old in (True, False):
            value = "inherit" if old == defaults[key] else ("on" if old else "off")
            Workspace.objects.filter(**{f"{key}_old": old}).update(**{key: value})


def to_booleans(apps, schema_editor):
    Workspace = apps.get_model("workspaces", "Workspace")
    defaults = _global_defaults(apps)
    for key in KEYS:
        Workspace.objects.filter(**{key: "on"}).update(**{f"{key}_old": True})
        Workspace.objects.filter(**{key: "off"}).update(**{f"{key}_old": False})
        Workspace.objects.filter(**{key: "inherit"}).update(**{f"{key}_old": defaults[key]})


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0002_api_tokens"),
        ("workspaces", "0002_workspace_stall_kill_minutes"),
    ]

    operations = [
        *(
            migrations.RenameField(model_name="workspace", old_name=key, new_name=f"{key}_old")
            for key in KEYS
        ),
        *(
            migrations.AddField(
                model_name="workspace",
                name=key,
                field=models.CharField(choices=CHOICES, default="inherit", max_length=7),
            )
            for key in KEYS
        ),
        migrations.RunPython(to_choices, to_booleans, elidable=True),
        *(migrations.RemoveField(model_name="workspace", name=f"{key}_old") for key in KEYS),
        *(
            migrations.AddConstraint(
                model_name="workspace",
                constraint=models.CheckConstraint(
                    condition=models.Q(**{f"{key}__in": ["inherit", "on", "off"]}),
                    name=f"workspaces_workspace_{key}_valid",
                ),
            )
            for key in KEYS
        ),
    ]
