from django.urls import path

from .consumers import EvaluationConsumer

websocket_urlpatterns = [
    path("ws/evaluations/<int:evaluation_id>/", EvaluationConsumer.as_asgi()),
]
