"""A real OpenAI-compatible chat-completions server on loopback, answering from a script; and
helpers to write scripts."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TASKS = HERE / "tasks"


def reply(
    text: str = "",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    prompt_tokens: int = 100,
    completion_tokens: int = 20,
    finish_reason: str | None = None,
    delay: float = 0.0,
    reasoning: str = "",
) -> dict[str, Any]:
    """One scripted chat completion. ``tool_calls``: ``[{"id", "name", "arguments"}]``."""
    return {
        "text": text,
        "tool_calls": tool_calls or [],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
        "delay": delay,
        "reasoning": reasoning,
    }


def error(status: int, body: str = '{"error": {"message": "scripted failure"}}') -> dict[str, Any]:
    return {"status": status, "body": body}


def raw(body: str, status: int = 200) -> dict[str, Any]:
    return {"status": status, "body": body, "raw": True}


class ScriptedServer:
    """Answers ``POST /v1/chat/completions`` with the script's entries in order; when the script
    runs out it answers a plain reply without a candidate."""

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.paths.append(self.path)
                    step = server.script.pop(0) if server.script else reply("I have nothing more to add.")
                if not self.path.endswith("/chat/completions"):
                    self._send(404, '{"error": "not found"}')
                    return
                if "status" in step:
                    self._send(step["status"], step["body"])
                    return
                if step.get("delay"):
                    time.sleep(step["delay"])
                message: dict[str, Any] = {"role": "assistant", "content": step["text"] or None}
                if step.get("reasoning"):
                    message["reasoning_content"] = step["reasoning"]
                if step["tool_calls"]:
                    message["tool_calls"] = [
                        {
                            "id": c["id"],
                            "type": "function",
                            "function": {"name": c["name"], "arguments": c["arguments"]},
                        }
                        for c in step["tool_calls"]
                    ]
                usage = dict(step["usage"])
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                payload = {
                    "id": f"chatcmpl-{len(server.requests)}",
                    "object": "chat.completion",
                    "model": body.get("model", ""),
                    "choices": [{"index": 0, "message": message, "finish_reason": step["finish_reason"]}],
                    "usage": usage,
                }
                self._send(200, json.dumps(payload))

            def _send(self, status: int, body: str) -> None:
                data = body.encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def kernel_reply(
    source: str, *, action: str | None = None, lang: str = "python", note: str = "Here is my kernel."
) -> str:
    """A plain-text protocol reply carrying ``source`` in a fenced block."""
    action_line = f"\nACTION: {action}\n" if action else ""
    return f"{note}\n{action_line}\n```{lang}\n{source.rstrip()}\n```\n"
