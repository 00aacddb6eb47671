"""A real HTTP server on loopback that answers like vLLM's ``POST /v1/completions`` (a prompt of token
ids in; the sampled ids and their log-probs out) from a small random model loaded with
``from_pretrained`` (decoding greedily whatever the temperature, so tests can predict it), and reloads its weights on ``POST /update_weights_from_disk`` (SGLang's API)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch


class _Server(ThreadingHTTPServer):
    # A run sends every rollout's request at once (up to generation.concurrency); with http.server's
    # listen backlog of 5 the kernel resets the connections past it while the handlers are busy.
    request_queue_size = 128


class CompletionsServer:
    """``ids_as``: "token_ids" (vLLM's ``return_token_ids``), "logprob_tokens" (``token_id:N``
    strings, vLLM's ``return_tokens_as_token_ids``) or "none" (a server that returns text only)."""

    def __init__(self, model_path: str, eos_token_id: int, *, ids_as: str = "token_ids") -> None:
        self.eos_token_id = eos_token_id
        self.ids_as = ids_as
        self.requests: list[dict[str, Any]] = []
        self.reloads: list[str] = []
        self._lock = threading.Lock()
        self.load(model_path)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/v1/completions":
                    status, answer = 200, server.complete(body)
                elif self.path == "/update_weights_from_disk":
                    server.load(body["model_path"])
                    server.reloads.append(body["model_path"])
                    status, answer = 200, {"success": True}
                else:
                    status, answer = 404, {"error": self.path}
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def load(self, path: str) -> None:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(path)
        model.eval()
        with self._lock:
            self.model = model

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(body)
        prompt = torch.tensor([body["prompt"]], dtype=torch.long)
        with self._lock, torch.no_grad():
            out = self.model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                      max_new_tokens=int(body["max_tokens"]), eos_token_id=self.eos_token_id,
                                      pad_token_id=self.eos_token_id, output_scores=True,
                                      return_dict_in_generate=True)
        ids = out.sequences[0, prompt.shape[1]:].tolist()
        logprobs = [float(torch.log_softmax(score[0].float(), -1)[t]) for score, t in zip(out.scores, ids)]
        finish = "stop" if ids and ids[-1] == self.eos_token_id else "length"
        choice: dict[str, Any] = {"index": 0, "text": "", "finish_reason": finish}
        if self.ids_as == "token_ids":
            choice["token_ids"] = ids
            choice["logprobs"] = {"token_logprobs": logprobs}
        elif self.ids_as == "logprob_tokens":
            choice["logprobs"] = {"tokens": [f"token_id:{t}" for t in ids], "token_logprobs": logprobs}
        return {"id": "cmpl-test", "object": "text_completion", "choices": [choice]}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
