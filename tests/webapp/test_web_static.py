"""Static files from the ASGI app (webapp.core.static): real files served, escapes and NUL bytes 404."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator


def _get(path: str, raw_path: bytes) -> tuple[int, bytes]:
    from webapp.asgi import application

    async def run() -> tuple[int, bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": raw_path,
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1")],
            "client": ("127.0.0.1", 5000),
            "server": ("127.0.0.1", 8000),
        }
        communicator = ApplicationCommunicator(application, scope)
        await communicator.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await communicator.receive_output(timeout=20)
        body = b""
        while True:
            message = await communicator.receive_output(timeout=20)
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        return start["status"], body

    return async_to_sync(run)()


def test_a_static_file_is_served():
    status, body = _get("/static/arena/site.css", b"/static/arena/site.css")

    assert status == 200
    assert b".hack" in body


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/static/../..", b"/static/..%2f.."),
        ("/static/../../webapp/settings/base.py", b"/static/..%2f..%2fwebapp/settings/base.py"),
        ("/static/arena/\x00.css", b"/static/arena/%00.css"),
        ("/static/no/such/file.css", b"/static/no/such/file.css"),
    ],
)
def test_paths_that_leave_the_static_folders_are_404_not_500(path, raw):
    status, body = _get(path, raw)

    assert status == 404
    assert b"Nothing here" in body  # the styled 404 page, not a traceback
    assert b"SECRET_KEY" not in body
