"""Generation backends behind one interface: token ids in, token ids (and log-probs where the backend
has them) out, each request with its own budget.

- :class:`PolicyBackend`: Hugging Face ``generate`` through the policy (``training.policy``'s
  generator, or any object with its ``generate(prompts, sampling)`` shape).
- :class:`OpenAICompletionsBackend`: an OpenAI-compatible server (vLLM, SGLang) serving the policy,
  asked with ``POST /v1/completions`` and a prompt of token ids; the sampled ids are read from
  ``choices[].token_ids`` (vLLM's ``return_token_ids``) or from ``logprobs.tokens`` written as
  ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``). After an update,
  :meth:`OpenAICompletionsBackend.sync_weights` saves the policy with ``save_pretrained`` into a
  fresh directory and asks the server to load it (SGLang's ``/update_weights_from_disk`` by default).

:class:`GenerationBatcher` lets many rollout threads share one backend: a batch runs once every live
rollout has asked (or finished), so the batches, and with a fixed seed the samples, repeat exactly.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from training.policy import Generator, Sampling


@dataclass
class GenerationRequest:
    prompt_ids: list[int]
    max_new_tokens: int  # this request's own budget


@dataclass
class GenerationOutput:
    token_ids: list[int]
    finish_reason: str  # "stop" (ended with the end-of-turn token) or "length" (its budget ran out)
    logprobs: list[float] | None = None  # per sampled token, when the backend reports them


class GenerationBackend(Protocol):
    def generate(self, requests: Sequence[GenerationRequest], *, temperature: float, top_p: float
                 ) -> list[GenerationOutput]: ...

    def sync_weights(self, model: Any, step: int) -> None:
        """Make the next generations sample from ``model`` (a no-op when the backend holds it)."""
        ...


def _finish(ids: list[int], budget: int, eos_id: int) -> tuple[list[int], str]:
    """Cut to the end-of-turn token (kept) or to the request's budget."""
    if eos_id in ids[:budget]:
        return ids[: ids.index(eos_id) + 1], "stop"
    return ids[:budget], "length"


class PolicyBackend:
    """Samples with the policy's own ``generate`` (KV cache, left-padded batches).

    One ``generate`` call per chunk of ``batch_size`` requests, with the chunk's largest budget;
    each output is then cut to its own request's budget. Sampling is autoregressive, so the kept
    prefix is exactly a sample under the shorter budget: a long request never shortens the others.
    """

    def __init__(self, generator: Generator, eos_token_id: int, *, batch_size: int = 64) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.generator = generator
        self.eos_token_id = eos_token_id
        self.batch_size = batch_size

    def generate(self, requests: Sequence[GenerationRequest], *, temperature: float, top_p: float
                 ) -> list[GenerationOutput]:
        out: list[GenerationOutput] = []
        for start in range(0, len(requests), self.batch_size):
            chunk = requests[start : start + self.batch_size]
            budget = max(r.max_new_tokens for r in chunk)
            sampled = self.generator.generate([list(r.prompt_ids) for r in chunk],
                                              Sampling(temperature=temperature, top_p=top_p, max_new_tokens=budget))
            for request, ids in zip(chunk, sampled):
                kept, reason = _finish(list(ids), request.max_new_tokens, self.eos_token_id)
                out.append(GenerationOutput(token_ids=kept, finish_reason=reason))
        return out

    def sync_weights(self, model: Any, step: int) -> None:
        pass  # the generator samples from the live policy


class ServerError(RuntimeError):
    """The generation server failed or answered something that is not a completion with token ids."""


def parse_completion_choice(choice: dict[str, Any]) -> tuple[list[int], list[float] | None, str]:
    """(sampled ids, their log-probs or None, finish reason) from one ``/v1/completions`` choice."""
    logprobs = choice.get("logprobs") or {}
    ids: list[int] | None = None
    if isinstance(choice.get("token_ids"), list):
        ids = [int(t) for t in choice["token_ids"]]
    elif isinstance(logprobs.get("tokens"), list):
        ids = []
        for token in logprobs["tokens"]:
            if not (isinstance(token, str) and token.startswith("token_id:")):
                raise ServerError(f"logprobs.tokens entry {token!r} is not 'token_id:N': start the server so it "
                                  "returns token ids (vLLM: return_tokens_as_token_ids / return_token_ids)")
            ids.append(int(token.split(":", 1)[1]))
    if ids is None:
        raise ServerError("the completion carries no token ids (neither choices[].token_ids nor "
                          "logprobs.tokens as 'token_id:N'); training needs the exact sampled ids")
    values = logprobs.get("token_logprobs")
    lps = [float(v) for v in values] if isinstance(values, list) and len(values) == len(ids) else None
    return ids, lps, str(choice.get("finish_reason") or "")


class OpenAICompletionsBackend:
    """A vLLM/SGLang server on ``base_url`` (``http://host:8000``, with or without ``/v1``).

    Requests are sent concurrently (the server batches them); each carries its own ``max_tokens``.
    ``weights_dir`` + ``reload_path`` + ``reload_key`` describe the weight hand-over: the policy is
    saved to ``weights_dir/step_N`` and ``POST {server}{reload_path}`` gets ``{reload_key: path}``.
    """

    def __init__(self, base_url: str, model: str, *, eos_token_id: int, timeout_s: float = 600.0,
                 concurrency: int = 64, weights_dir: str | Path | None = None,
                 reload_path: str = "/update_weights_from_disk", reload_key: str = "model_path",
                 tokenizer: Any = None, extra_body: dict[str, Any] | None = None) -> None:
        import httpx

        root = base_url.rstrip("/")
        self.server = root[: -len("/v1")] if root.endswith("/v1") else root
        self.model = model
        self.eos_token_id = eos_token_id
        self.weights_dir = Path(weights_dir) if weights_dir is not None else None
        self.reload_path = reload_path
        self.reload_key = reload_key
        self.tokenizer = tokenizer  # saved next to the weights when it has save_pretrained
        self.extra_body = dict(extra_body or {})
        self._client = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=10.0))
        self._executor = cf.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="gen")

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._client.close()

    def _one(self, request: GenerationRequest, temperature: float, top_p: float) -> GenerationOutput:
        import httpx

        body = {"model": self.model, "prompt": list(request.prompt_ids), "max_tokens": request.max_new_tokens,
                "temperature": temperature, "top_p": top_p, "logprobs": 0, "return_token_ids": True,
                "return_tokens_as_token_ids": True, "skip_special_tokens": False, **self.extra_body}
        url = f"{self.server}/v1/completions"
        try:
            response = self._client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise ServerError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc
        if response.status_code >= 300:
            raise ServerError(f"{url} answered HTTP {response.status_code}: {response.text[:300]}")
        try:
            choice = response.json()["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ServerError(f"{url} did not answer a completion: {response.text[:300]!r}") from exc
        ids, lps, reason = parse_completion_choice(choice)
        kept, finish = _finish(ids, request.max_new_tokens, self.eos_token_id)
        if finish == "length" and reason == "stop" and len(kept) < request.max_new_tokens:
            # the server stopped at the end-of-turn token without listing it: the turn did end
            kept, finish = kept + [self.eos_token_id], "stop"
        if lps is not None:
            lps = lps[: len(kept)] if len(lps) >= len(kept) else None
        return GenerationOutput(token_ids=kept, finish_reason=finish, logprobs=lps)

    def generate(self, requests: Sequence[GenerationRequest], *, temperature: float, top_p: float
                 ) -> list[GenerationOutput]:
        futures = [self._executor.submit(self._one, r, temperature, top_p) for r in requests]
        return [f.result() for f in futures]

    def sync_weights(self, model: Any, step: int) -> None:
        if self.weights_dir is None:
            raise ServerError("sync_weights needs weights_dir: where the server can read the saved policy")
        path = (self.weights_dir / f"step_{step:06d}").resolve()
        if hasattr(model, "peft_config"):  # the sampling adapter only, not a critic's sharing the base
            model.save_pretrained(path, selected_adapters=[model.active_adapter])
        else:
            model.save_pretrained(path)
        if self.tokenizer is not None and hasattr(self.tokenizer, "save_pretrained"):
            self.tokenizer.save_pretrained(path)
        url = f"{self.server}{self.reload_path}"
        response = self._client.post(url, json={self.reload_key: str(path)})
        if response.status_code >= 300:
            raise ServerError(f"{url} refused the new weights: HTTP {response.status_code}: {response.text[:300]}")


class GenerationBatcher:
    """Many rollout threads, one backend: ``request`` blocks until the batch it belongs to ran.

    A batch runs when every registered rollout is either waiting in ``request`` or has called
    ``finish``; the thread whose request completes the set runs it. A backend failure is raised in
    every waiting thread.
    """

    def __init__(self, backend: GenerationBackend, *, temperature: float, top_p: float) -> None:
        self.backend = backend
        self.temperature = temperature
        self.top_p = top_p
        self._cond = threading.Condition()
        self._live: set[int] = set()
        self._pending: dict[int, GenerationRequest] = {}
        self._results: dict[int, GenerationOutput | BaseException] = {}
        self.batches: list[int] = []  # size of every batch run, in order

    def register(self, keys: Sequence[int]) -> None:
        with self._cond:
            self._live.update(keys)

    def finish(self, key: int) -> None:
        with self._cond:
            self._live.discard(key)
            self._pending.pop(key, None)
        self._maybe_run()

    def request(self, key: int, request: GenerationRequest) -> GenerationOutput:
        with self._cond:
            if key not in self._live:
                raise RuntimeError(f"rollout {key} is not registered with the batcher")
            self._pending[key] = request
        self._maybe_run()
        with self._cond:
            while key not in self._results:
                self._cond.wait()
            result = self._results.pop(key)
        if isinstance(result, BaseException):
            raise result
        return result

    def _maybe_run(self) -> None:
        with self._cond:
            if not self._pending or set(self._pending) != self._live:
                return
            batch = sorted(self._pending.items())
            self._pending.clear()
        keys = [k for k, _ in batch]
        try:
            outputs: list[GenerationOutput] | BaseException = self.backend.generate(
                [r for _, r in batch], temperature=self.temperature, top_p=self.top_p)
        except Exception as exc:  # every waiting rollout learns of it
            outputs = exc
        with self._cond:
            self.batches.append(len(keys))
            for i, key in enumerate(keys):
                self._results[key] = outputs if isinstance(outputs, BaseException) else outputs[i]
            self._cond.notify_all()
