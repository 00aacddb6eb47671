"""A strict Content-Security-Policy: scripts only from our own origin, so nothing a kernel or a
model wrote can run even if it slipped past the template escaping."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
)
# The OpenAPI docs page (Swagger UI) loads its own inline bootstrap script.
EXEMPT_PREFIXES = ("/api/docs", "/admin/")


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not request.path.startswith(EXEMPT_PREFIXES):
            response.setdefault("Content-Security-Policy", POLICY)
        return response
