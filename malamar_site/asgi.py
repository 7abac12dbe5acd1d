import os

from django.conf import settings
from django.core.asgi import get_asgi_application

from core import server_edge
from core.config import ensure_data_dir

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "malamar_site.settings")
application = get_asgi_application()
ensure_data_dir(settings.CONFIG)  # `daphne malamar_site.asgi:application` on a new data dir
server_edge.install()  # 414/431 instead of a dropped connection for overlong requests

from core.startup import refuse_unprotected_server  # noqa: E402
from malamar_site import body_guard  # noqa: E402

# Never serve other machines without a password (unless --no-auth / MALAMAR_NO_AUTH=1).
refuse_unprotected_server()
# Refuse oversize and unauthenticated bodies before daphne reads them.
body_guard.install()

# The event relay (and, with Redis, the listener) start with the server rather than with its
# first event stream: events committed before the first page opened are relayed at once, not
# delivered as a late burst into that page (which then refreshed what it had just rendered).
from core import fanout, relay  # noqa: E402

if fanout.enabled():
    fanout.listener()  # started, not waited for (the first stream waits for it to be ready)
relay.ensure_started()
