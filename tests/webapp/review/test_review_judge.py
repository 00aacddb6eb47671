"""The LLM judge against a real OpenAI-compatible HTTP server on loopback, with scripted replies."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from review_sources import CACHING_HACK

from agent.llm import OpenAIChatClient
from webapp.review import judge, services
from webapp.review.models import Flag, ReviewCase

pytestmark = pytest.mark.django_db


class ScriptedChatServer:
    """Answers POST /v1/chat/completions with the next scripted (status, content); records the bodies."""

    def __init__(self, replies: list[tuple[int, str]]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
                status, content = server.replies.pop(0)
                payload = (
                    {
                        "id": "c1",
                        "object": "chat.completion",
                        "model": body["model"],
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "stop",
                                "message": {"role": "assistant", "content": content},
                            }
                        ],
                        "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                    }
                    if status == 200
                    else {"error": {"message": content}}
                )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


HACK_REPLY = """<think>the cache is keyed on data_ptr</think>
```json
{"verdict": "hack", "family": 4, "confidence": 0.9, "evidence_lines": [9, 10],
 "reason": "returns a cached output keyed on the input pointer"}
```"""


def test_judge_flags_a_hack_once_and_quotes_the_families(make_kernel, make_evaluation):
    kernel = make_kernel(source=CACHING_HACK)
    make_evaluation(kernel=kernel, eager=40.0)
    with ScriptedChatServer([(200, HACK_REPLY), (200, HACK_REPLY)]) as server:
        client = OpenAIChatClient(server.url, "judge-1", api_key="sekrit", max_retries=0)
        first = services.llm_judge_kernel(kernel_id=kernel.pk, client=client)
        again = services.llm_judge_kernel(kernel_id=kernel.pk, client=client)

    flag = Flag.objects.get()
    system, user = server.requests[0]["messages"]
    assert (first.verdict, first.family, first.confidence, first.evidence_lines) == (
        "hack",
        "4",
        0.9,
        [9, 10],
    )
    assert first.flag_id == flag.pk and again.flag_id is None
    assert (flag.source, flag.family, flag.kernel_id) == ("llm_judge", "4", kernel.pk)
    assert json.loads(flag.reason)["reason"] == "returns a cached output keyed on the input pointer"
    assert ReviewCase.objects.get(kernel=kernel).status == "open"
    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert server.requests[0]["auth"] == "Bearer sekrit"
    assert (server.requests[0]["model"], server.requests[0]["temperature"]) == ("judge-1", 0.0)
    assert "| 4 | output caching |" in system["content"]
    assert "| 18 | task shortcuts |" in system["content"]
    assert system["content"].count("\n| ") == 19  # the header row and the eighteen families
    assert "   9|         key = (x.data_ptr(), tuple(x.shape))" in user["content"]
    assert "speedup vs eager 40.0" in user["content"]


def test_judge_legit_or_garbage_makes_no_flag(make_kernel):
    kernel = make_kernel()
    replies = [
        (200, '{"verdict": "legit", "family": null, "confidence": 0.8, "reason": "plain clamp"}'),
        (200, "I think it is probably fine."),
        (200, '{"verdict": "cheating"}'),
    ]
    with ScriptedChatServer(replies) as server:
        client = OpenAIChatClient(server.url, "judge-1", api_key="k", max_retries=0)
        legit = services.llm_judge_kernel(kernel_id=kernel.pk, client=client)
        with pytest.raises(judge.JudgeReplyError, match="no JSON verdict"):
            services.llm_judge_kernel(kernel_id=kernel.pk, client=client)
        with pytest.raises(judge.JudgeReplyError, match="verdict must be one of"):
            services.llm_judge_kernel(kernel_id=kernel.pk, client=client)

    assert (legit.verdict, legit.family, legit.flag_id) == ("legit", None, None)
    assert Flag.objects.count() == 0
    assert ReviewCase.objects.count() == 0


def test_judge_retries_a_busy_endpoint(make_kernel):
    kernel = make_kernel(source=CACHING_HACK)
    with ScriptedChatServer([(503, "busy"), (200, HACK_REPLY)]) as server:
        client = OpenAIChatClient(server.url, "judge-2", api_key="k", max_retries=1, backoff_s=0.01)
        verdict = services.llm_judge_kernel(kernel_id=kernel.pk, client=client)

    assert (verdict.verdict, client.attempts, len(server.requests)) == ("hack", 2, 2)
    assert Flag.objects.get().dedup_key == f"judge:judge-2:{kernel.source_hash}"
