"""django-ninja bearer auth backed by ApiToken."""

from __future__ import annotations

from ninja.security import HttpBearer

from .selectors import api_token_user


class ApiTokenAuth(HttpBearer):
    def authenticate(self, request, token):
        user = api_token_user(raw=token)
        if user is not None:
            request.user = user
        return user
