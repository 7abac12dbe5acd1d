"""The step `malamar` runs in a child process before it starts the server and the worker:
migrate (a first launch seeds the sample workspace), then refuse to serve other machines without
a password. Exits 0 when the server may start; so `malamar` itself never loads Django."""

import os
import sys


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")
    import django
    from django.conf import settings
    from django.core.management import call_command

    django.setup()
    try:
        call_command("migrate", "--no-input", "-v", "0")
    except SystemExit as exc:
        return int(exc.code or 0)
    from core.auth import remote_access_refusal

    refusal = remote_access_refusal(bind=settings.CONFIG.host)  # the address daphne binds
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from core.prompt_exit import exit_now

    exit_now(main())
