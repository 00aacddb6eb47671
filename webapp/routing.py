"""Websocket routes; each app contributes its own ``websocket_urlpatterns``."""

from webapp.arena.routing import websocket_urlpatterns as arena_websockets
from webapp.rollouts.routing import websocket_urlpatterns as rollout_websockets
from webapp.training_runs.routing import websocket_urlpatterns as training_websockets

websocket_urlpatterns: list = [*arena_websockets, *rollout_websockets, *training_websockets]
