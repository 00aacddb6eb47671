"""ASGI entry point (daphne/uvicorn): Django over HTTP, Channels consumers over websockets."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings.local")

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()
if settings.SERVE_STATIC:
    from webapp.core.static import StaticFilesHandler

    django_asgi_app = StaticFilesHandler(django_asgi_app)

if settings.JOB_BACKEND == "embedded":  # no Celery beat here: this process sweeps its own jobs' rows
    from webapp.core.sweeper import sweeper_thread_start

    sweeper_thread_start()

from webapp.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {"http": django_asgi_app, "websocket": AuthMiddlewareStack(URLRouter(websocket_urlpatterns))}
)
