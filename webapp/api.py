"""The project's one NinjaAPI; each app contributes a router from its own ``api.py``."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from ninja import NinjaAPI

from webapp.accounts.services import LimitExceeded
from webapp.arena.api import router as arena_router
from webapp.core.permissions import NotAllowed
from webapp.review.api import router as review_router
from webapp.rollouts.api import router as rollouts_router
from webapp.training_runs.api import router as training_router

api = NinjaAPI(
    title="KernelCourt API",
    version="1",
    description="Tasks, kernels, evaluations and leaderboards. Writes need `Authorization: Bearer <token>` "
    "(`manage.py create_api_token USER`).",
    urls_namespace="api",
)
api.add_router("/", arena_router)
api.add_router("/review", review_router)
api.add_router("/rollouts", rollouts_router)
api.add_router("/training", training_router)


@api.exception_handler(RequestDataTooBig)
def request_too_big(request, exc):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return api.create_response(request, {"detail": f"the request body is over {limit} bytes"}, status=413)


@api.exception_handler(NotAllowed)
def not_allowed(request, exc):
    return api.create_response(request, {"detail": str(exc)}, status=403)


@api.exception_handler(LimitExceeded)
def limit_exceeded(request, exc):
    return api.create_response(request, {"detail": str(exc)}, status=429)
