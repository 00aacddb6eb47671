"""django-ninja bearer auth backed by ApiToken."""

from __future__ import annotations

from ninja.security import HttpBearer, SessionAuth

from .selectors import api_token_user


class ApiTokenAuth(HttpBearer):
    def authenticate(self, request, token):
        user = api_token_user(raw=token)
        if user is not None:
            request.user = user
        return user


class OptionalApiTokenAuth(ApiTokenAuth):
    """For reads anyone may make whose answer depends on who asks (e.g. a job's error, shown to its
    owner): without an Authorization header the request goes on as the session's user (or
    anonymous); with one, the token must be valid."""

    def __call__(self, request):
        if not request.headers.get("Authorization"):
            return request.user
        return super().__call__(request)


class SignedInSessionAuth(SessionAuth):
    """Django's session, for the browser. A request with no signed-in session gets 401 like any other
    unauthenticated request: the CSRF check protects a session, and there is none to protect."""

    def _get_key(self, request):
        if not request.user.is_authenticated:
            return None
        return super()._get_key(request)
