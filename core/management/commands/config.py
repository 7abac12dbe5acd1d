from django.conf import settings
from django.core.management.base import BaseCommand

from core.config import OPTIONS


class Command(BaseCommand):
    help = "Print Malamar's final configuration (defaults < flags < environment variables)."

    def handle(self, *args, **options):
        self.stdout.write(config_report(settings.CONFIG))


def config_report(config) -> str:
    envs = {option.name: option.env for option in OPTIONS}
    lines = ["Malamar configuration", ""]
    width = max(len(name) for name, _ in config.as_rows())
    for name, value in config.as_rows():
        env = envs.get(name)
        lines.append(f"  {name.ljust(width)}  {value}" + (f"    ({env})" if env else ""))
    lines.append(f"  {'public_url'.ljust(width)}  {settings.PUBLIC_URL}    (MALAMAR_PUBLIC_URL)")
    return "\n".join(lines)
