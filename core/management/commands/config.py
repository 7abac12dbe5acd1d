from django.conf import settings
from django.core.management.base import BaseCommand

from core.config import report


class Command(BaseCommand):
    help = "Print Malamar's final configuration: every option, its value and where it comes from."
    requires_system_checks = []

    def handle(self, *args, **options):
        self.stdout.write(report(settings.CONFIG))
