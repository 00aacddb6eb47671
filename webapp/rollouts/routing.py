from django.urls import path

from .consumers import RolloutConsumer

websocket_urlpatterns = [
    path("ws/rollouts/<int:rollout_id>/", RolloutConsumer.as_asgi()),
]
