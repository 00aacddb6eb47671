"""Static files from the ASGI app (daphne has no static handler): Django's handler, with paths that
try to leave the static folders (``/static/..%2f..``) or carry NUL bytes answered 404, not 500."""

from __future__ import annotations

import posixpath

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousFileOperation
from django.http import Http404


def _inside(relative: str) -> bool:
    """Whether a URL path below STATIC_URL names a file below the static folders."""
    if "\x00" in relative or "\\" in relative:
        return False
    normal = posixpath.normpath(relative)
    return not (normal.startswith("/") or normal == ".." or normal.startswith("../"))


class StaticFilesHandler(ASGIStaticFilesHandler):
    def serve(self, request):
        if not _inside(request.path.removeprefix(self.base_url.path)):
            raise Http404("no such static file")
        try:
            return super().serve(request)
        except SuspiciousFileOperation as exc:  # a finder's own check, should one still trip
            raise Http404("no such static file") from exc
