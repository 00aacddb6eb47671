"""Refuse unstorable text in URLs before any view runs: a NUL or a lone surrogate in the path or in a
page's query string would reach a database query (PostgreSQL cannot hold either) and end in a 500.

The API's query parameters are left to its schemas (webapp.core.text types answer 422 per field);
its paths are checked here, answered as JSON."""

from __future__ import annotations

from django.core.exceptions import BadRequest
from django.http import HttpRequest, HttpResponse, JsonResponse

from .text import text_problem

URL_TEXT_MAX = 4096


class UnstorableTextMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        api = request.path.startswith("/api/")
        problem = text_problem(request.path, max_length=URL_TEXT_MAX)
        if problem:
            problem = f"the URL path {problem}"
        elif not api:
            for key, values in request.GET.lists():
                for value in [key, *values]:
                    found = text_problem(value, max_length=URL_TEXT_MAX)
                    if found:
                        problem = f"the query parameter {key[:40]!r} {found}"
                        break
                if problem:
                    break
        if problem:
            if api:
                return JsonResponse({"detail": problem}, status=400)
            raise BadRequest(problem)
        return self.get_response(request)
