import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from core import server_edge
from core.config import ensure_data_dir

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")
application = get_asgi_application()
ensure_data_dir(settings.CONFIG)  # `daphne malamar_site.asgi:application` on a new data dir
server_edge.install()  # 414/431 instead of a dropped connection for overlong requests

from malamar_site import body_guard  # noqa: E402
from malamar_site.startup import refuse_unprotected_server  # noqa: E402

# Never serve other machines without a password (unless --no-auth / MALAMAR_NO_AUTH=1).
refuse_unprotected_server()
# Refuse oversize and unauthenticated bodies before daphne reads them.
body_guard.install()
