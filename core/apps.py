from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _seed_after_migrate(sender, **kwargs):
    from core.first_launch import seed_sample_workspace_if_first_launch

    seed_sample_workspace_if_first_launch()


class CoreConfig(AppConfig):
    name = "core"

    def ready(self):
        # `python manage.py runserver` serves on Malamar's host and port, not Django's 8000.
        from daphne.management.commands import runserver
        from django.conf import settings

        runserver.Command.default_addr = settings.CONFIG.host
        runserver.Command.default_port = str(settings.CONFIG.port)
        # Runs after the last app's migrations (sender filter keeps it once per migrate).
        post_migrate.connect(_seed_after_migrate, sender=self, dispatch_uid="malamar-seed")
