from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _seed_after_migrate(sender, **kwargs):
    from core.first_launch import seed_sample_workspace_if_first_launch

    seed_sample_workspace_if_first_launch()


class CoreConfig(AppConfig):
    name = "core"

    def ready(self):
        # Runs after the last app's migrations (sender filter keeps it once per migrate).
        post_migrate.connect(_seed_after_migrate, sender=self, dispatch_uid="malamar-seed")
