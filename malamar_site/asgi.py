import os

from django.core.asgi import get_asgi_application

from core import server_edge

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")
application = get_asgi_application()
server_edge.install()  # 414/431 instead of a dropped connection for overlong requests


def _refuse_unprotected_remote_access() -> None:
    """Never serve other machines without a password (unless --no-auth was chosen)."""
    from django.core.exceptions import ImproperlyConfigured
    from django.db import DatabaseError

    from core.auth import remote_access_refusal

    try:
        refusal = remote_access_refusal()
    except DatabaseError:  # not migrated yet: nothing to protect, nothing stored
        return
    if refusal:
        raise ImproperlyConfigured(refusal)


_refuse_unprotected_remote_access()
