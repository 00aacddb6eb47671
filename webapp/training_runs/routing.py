from django.urls import path

from .consumers import TrainingRunConsumer

websocket_urlpatterns = [
    path("ws/training/<int:run_id>/", TrainingRunConsumer.as_asgi()),
]
