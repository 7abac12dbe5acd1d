from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _seed_after_migrate(sender, **kwargs):
    # Imported on use: it needs the apps' models, and this module loads with the registry.
    from core.first_launch import seed_sample_workspace_if_first_launch

    seed_sample_workspace_if_first_launch()


class CoreConfig(AppConfig):
    name = "core"

    def ready(self):
        # Django reads at most 1 KB of headers per multipart part: a file name of ~900+ bytes
        # made an attachment upload fail. Names are shortened when stored
        # (chats.attachments.attachment_name), so accept them long here; the body stays capped.
        from django.http import multipartparser

        multipartparser.MAX_TOTAL_HEADER_SIZE = 64 * 1024
        # Runs after the last app's migrations (sender filter keeps it once per migrate).
        post_migrate.connect(_seed_after_migrate, sender=self, dispatch_uid="malamar-seed")
