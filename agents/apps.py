from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _seed_after_migrate(sender, **kwargs):
    # Imported on use: it needs the apps' models, and this module loads with the registry.
    from agents.first_launch import seed_sample_workspace_if_first_launch

    seed_sample_workspace_if_first_launch()


class AgentsConfig(AppConfig):
    name = "agents"

    def ready(self):
        # post_migrate is sent once per app after the whole plan has run (every app's tables
        # exist); the sender filter keeps the seeding to one call per migrate.
        post_migrate.connect(_seed_after_migrate, sender=self, dispatch_uid="malamar-seed")
