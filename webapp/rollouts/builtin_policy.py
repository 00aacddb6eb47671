"""The built-in LLM endpoint: a small scripted policy behind an OpenAI-compatible chat-completions
API on loopback, served by the app itself (a thread), so a first rollout needs no model and no key.

The policy reads the task from the agent's task prompt (agent.prompts.task_prompt: the device, and the
reference in a fenced block) and writes a real ``ModelNew``: for a task of our suite, the suite's
reference kernel for the device (C++ on the CPU, CUDA on a GPU); for any other task, a PyTorch-level
rewrite that runs the reference's own modules (passes on the open track). It asks the evaluator to
verify first, then submits, then stops writing code, so the agent loop ends on its own.

No Django here: the web app registers the endpoint (services.llm_endpoint_builtin_start).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.protocol import find_code_blocks

MODEL_NAME = "kernelcourt-scripted"
REQUEST_MAX_BYTES = 8 * 1024 * 1024
_DEVICE = re.compile(r"for device `(?P<device>[a-z]+)`")


def _task_of(messages: list[dict[str, Any]]) -> tuple[str, str]:
    """(reference source, device) from the first user message that carries the task prompt."""
    for message in messages:
        content = message.get("content")
        if message.get("role") != "user" or not isinstance(content, str):
            continue
        blocks = [b for b in find_code_blocks(content) if "class Model" in b.body]
        if blocks:
            match = _DEVICE.search(content)
            return blocks[0].body, match["device"] if match else "cpu"
    return "", "cpu"


def _suite_kernel(reference: str, device: str) -> str | None:
    from gpu_workers.suite import list_tasks

    wanted = reference.strip()
    for task in list_tasks():
        if task.task_source.strip() == wanted:
            try:
                return task.kernel_source(device)
            except ValueError:
                return None
    return None


def _wrapper_kernel(reference: str) -> str:
    return (
        f"{reference.rstrip()}\n\n\n"
        "class ModelNew(Model):\n"
        '    """The reference\'s own computation: a correct starting point (a PyTorch-level rewrite,\n'
        '    accepted on the open track); a real policy would write custom kernels from here."""\n'
    )


def policy_reply(messages: list[dict[str, Any]]) -> str:
    """The scripted policy: verify a kernel, submit it, then stop."""
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    reference, device = _task_of(messages)
    if not reference:
        return "I cannot find the reference Model in the prompt, so I have no kernel to offer."
    if turn >= 2:
        return "That is my best kernel; I have nothing better to add."
    suite_kernel = _suite_kernel(reference, device)
    source = suite_kernel if suite_kernel is not None else _wrapper_kernel(reference)
    if turn == 0:
        why = (
            f"This task is in the KernelCourt suite; here is a hand-written {device} kernel for it."
            if suite_kernel is not None
            else "I start from the reference computation, to check correctness first."
        )
        return f"{why} Let me verify it first.\n\nACTION: verify\n\n```python\n{source.rstrip()}\n```\n"
    return f"The kernel verified; submitting it.\n\nACTION: submit\n\n```python\n{source.rstrip()}\n```\n"


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:  # the web app's log is not the place for these
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        if not self.path.endswith("/chat/completions"):
            self._send(404, {"error": {"message": "not found"}})
            return
        if length > REQUEST_MAX_BYTES:
            self._send(413, {"error": {"message": "request too large"}})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        except (ValueError, AttributeError):
            self._send(400, {"error": {"message": "the body must be a JSON chat-completions request"}})
            return
        text = policy_reply(messages)
        prompt_chars = sum(len(str(m.get("content") or "")) for m in messages)
        usage = {"prompt_tokens": prompt_chars // 4, "completion_tokens": len(text) // 4}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        self._send(
            200,
            {
                "id": f"chatcmpl-builtin-{threading.get_ident()}",
                "object": "chat.completion",
                "model": body.get("model") or MODEL_NAME,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": usage,
            },
        )

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass


class BuiltinPolicyServer:
    """The policy's HTTP server on 127.0.0.1 (``port`` 0: any free port), in a daemon thread."""

    def __init__(self, port: int = 0) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="builtin-policy", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


_server: BuiltinPolicyServer | None = None
_server_lock = threading.Lock()


def builtin_policy_serve(port: int = 0) -> BuiltinPolicyServer:
    """This process's policy server, started on first use (one per process)."""
    global _server
    with _server_lock:
        if _server is None:
            _server = BuiltinPolicyServer(port)
        return _server


def builtin_policy_stop() -> None:
    global _server
    with _server_lock:
        if _server is not None:
            _server.close()
            _server = None
