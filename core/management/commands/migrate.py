"""`migrate`, after creating the data directory: the first process to migrate a new data
directory is a first launch (core.config.ensure_data_dir) and seeds the sample workspace."""

from django.conf import settings
from django.core.management.commands.migrate import Command as DjangoMigrate

from core.config import ensure_data_dir


class Command(DjangoMigrate):
    def execute(self, *args, **options):  # before its system checks open the database
        ensure_data_dir(settings.CONFIG)
        return super().execute(*args, **options)
