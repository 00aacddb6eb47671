"""Static files from the ASGI app (daphne has no static handler): Django's handler, with paths that
try to leave the static folders (``/static/..%2f..``) or carry NUL bytes answered 404, not 500."""

from __future__ import annotations

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404


class StaticFilesHandler(ASGIStaticFilesHandler):
    def serve(self, request):
        try:
            return super().serve(request)
        except (SuspiciousFileOperation, ValueError) as exc:  # ValueError: "embedded null byte"
            raise Http404("no such static file") from exc
