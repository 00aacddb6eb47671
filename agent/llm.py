"""LLM clients: an OpenAI-compatible chat-completions endpoint, and a local transformers model.

Both return a :class:`Completion`; messages are OpenAI-style dicts (``role``, ``content``, and for
native tool use ``tool_calls`` / ``tool_call_id``).
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

API_KEY_ENV_VARS = ("KERNELCOURT_LLM_API_KEY", "OPENAI_API_KEY")
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


@dataclass
class ToolCall:
    """A native tool call as the endpoint sent it; ``arguments`` is the raw JSON text, unparsed."""

    id: str
    name: str
    arguments: str

    def to_message(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class Completion:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    # Token-in/token-out for training: the ids the model saw and produced (local models only).
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    model: str = ""
    # Separate reasoning text from servers with a reasoning parser (vLLM/SGLang ``reasoning_content``).
    reasoning: str = ""


class LLMError(RuntimeError):
    """The model could not be asked (after retries where they apply)."""


class LLMConnectionError(LLMError):
    """The endpoint could not be reached or did not answer in time."""


class LLMHTTPError(LLMError):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


class LLMResponseError(LLMError):
    """The endpoint answered 2xx with something that is not a chat completion."""


@runtime_checkable
class ChatClient(Protocol):
    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int = 4096,
        temperature: float = 0.7,
    ) -> Completion: ...


def api_key_from_env() -> str | None:
    for name in API_KEY_ENV_VARS:
        value = os.environ.get(name)
        if value:
            return value
    return None


class OpenAIChatClient:
    """``POST {base_url}/chat/completions`` (vLLM, SGLang, OpenAI, …).

    ``base_url`` is the API root, e.g. ``http://host:8000/v1``; a URL without ``/v1`` gets it appended.
    Retries 429/5xx, timeouts and connection errors with exponential backoff and jitter; other 4xx
    fail at once.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 10.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        extra_body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        import httpx

        root = base_url.rstrip("/")
        if not root.endswith("/v1") and "/v1/" not in root + "/":
            root += "/v1"
        self.base_url = root
        self.model = model
        self.api_key = api_key if api_key is not None else api_key_from_env()
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.extra_body = dict(extra_body or {})
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        if self.api_key:
            all_headers["Authorization"] = f"Bearer {self.api_key}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            headers=all_headers,
        )
        self.attempts = 0  # total HTTP attempts, for tests and logs

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAIChatClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sleep_before_retry(self, attempt: int, retry_after: str | None) -> None:
        delay = min(self.backoff_max_s, self.backoff_s * (2**attempt))
        if retry_after:
            try:
                delay = min(self.backoff_max_s, max(delay, float(retry_after)))
            except ValueError:
                pass
        time.sleep(delay * (0.5 + random.random() / 2))

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int = 4096,
        temperature: float = 0.7,
    ) -> Completion:
        import httpx

        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            **self.extra_body,
        }
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        url = f"{self.base_url}/chat/completions"
        last_error = ""
        for attempt in range(self.max_retries + 1):
            self.attempts += 1
            retry_after = None
            try:
                response = self._client.post(url, json=body)
            except httpx.TimeoutException as exc:
                last_error = f"timed out talking to {url}: {type(exc).__name__}"
            except httpx.TransportError as exc:
                last_error = f"cannot reach {url}: {exc or type(exc).__name__}"
            else:
                if response.status_code < 300:
                    return _parse_chat_completion(response, self.model)
                detail = response.text[:500]
                if response.status_code not in RETRY_STATUSES:
                    raise LLMHTTPError(
                        response.status_code, f"{url} answered HTTP {response.status_code}: {detail}"
                    )
                last_error = f"{url} answered HTTP {response.status_code}: {detail}"
                retry_after = response.headers.get("retry-after")
                if attempt == self.max_retries:
                    raise LLMHTTPError(response.status_code, f"{last_error} (after {attempt + 1} attempts)")
            if attempt < self.max_retries:
                self._sleep_before_retry(attempt, retry_after)
        raise LLMConnectionError(f"{last_error} (after {self.max_retries + 1} attempts)")


def _parse_chat_completion(response: Any, model: str) -> Completion:
    try:
        data = response.json()
        choice = data["choices"][0]
        message = choice.get("message") or {}
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise LLMResponseError(f"not a chat completion: {response.text[:300]!r} ({exc})") from exc
    tool_calls = []
    for i, raw in enumerate(message.get("tool_calls") or []):
        function = raw.get("function") or {}
        arguments = function.get("arguments", "")
        if not isinstance(arguments, str):  # some servers send an object instead of JSON text
            arguments = json.dumps(arguments)
        tool_calls.append(
            ToolCall(
                id=str(raw.get("id") or f"call_{i}"), name=str(function.get("name", "")), arguments=arguments
            )
        )
    usage = data.get("usage") or {}
    return Completion(
        text=message.get("content") or "",
        tool_calls=tool_calls,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        finish_reason=str(choice.get("finish_reason") or ""),
        model=str(data.get("model") or model),
        reasoning=str(message.get("reasoning_content") or message.get("reasoning") or ""),
    )


# --------------------------------------------------------------------------------------------------
# Local transformers model

SIMPLE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _render_simple_chat(messages: list[dict[str, Any]]) -> str:
    parts = [f"<|{m.get('role', 'user')}|>\n{m.get('content') or ''}<|end|>\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def byte_level_tokenizer(specials: Sequence[str], *, chat_template: str, eos_token: str, pad_token: str,
                         bos_token: str | None = None) -> Any:
    """A Hugging Face tokenizer built in code (no download): byte b is id b, then ``specials``, one token
    each, from id 256 in their order; ``chat_template`` renders conversations."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = _bytes_to_unicode()
    tokenizer = Tokenizer(models.BPE(vocab={alphabet[b]: b for b in range(256)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(name, special=True, normalized=False) for name in specials])
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=bos_token, eos_token=eos_token,
                                   pad_token=pad_token)
    fast.chat_template = chat_template
    return fast


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character map (what the ByteLevel pre-tokenizer uses)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return dict(zip(printable, (chr(c) for c in chars)))


def build_byte_tokenizer() -> Any:
    """A byte-level tokenizer built in code (no download): 256 byte tokens plus an end and a pad token.

    Good enough to drive a tiny random model in tests; real runs load the model's own tokenizer.
    """
    return byte_level_tokenizer(["<|endoftext|>", "<|pad|>"], chat_template=SIMPLE_CHAT_TEMPLATE,
                                eos_token="<|endoftext|>", pad_token="<|pad|>")


class TransformersChatClient:
    """A local causal LM; plain-text protocol only (native tools are not offered to it).

    Build with ``TransformersChatClient.from_pretrained(path)`` or, for tests,
    ``TransformersChatClient.from_config(config, tokenizer)``. ``complete`` returns the prompt and
    generated token ids on the Completion; ``generate_ids`` is the token-in/token-out entry.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        device: str = "cpu",
        seed: int | None = None,
        ignore_eos: bool = False,
    ) -> None:
        self.model = model.to(device)
        self.ignore_eos = ignore_eos  # always generate max_tokens (benchmarks, tests)
        self.model.eval()
        self.tokenizer = tokenizer
        self.device = device
        self.seed = seed

    @classmethod
    def from_pretrained(
        cls, path: str, *, device: str = "cpu", dtype: Any = None, **kwargs: Any
    ) -> TransformersChatClient:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
        model_kwargs = {"dtype": dtype} if dtype is not None else {}
        model = AutoModelForCausalLM.from_pretrained(path, **model_kwargs)
        return cls(model, tokenizer, device=device, **kwargs)

    @classmethod
    def from_config(
        cls,
        config: Any,
        tokenizer: Any = None,
        *,
        device: str = "cpu",
        seed: int | None = 0,
        ignore_eos: bool = False,
    ) -> TransformersChatClient:
        """A randomly initialised model from a ``PretrainedConfig`` (tests; no download)."""
        import torch
        from transformers import AutoModelForCausalLM

        tokenizer = tokenizer if tokenizer is not None else build_byte_tokenizer()
        if seed is not None:
            torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
        return cls(model, tokenizer, device=device, seed=seed, ignore_eos=ignore_eos)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode_messages(self, messages: list[dict[str, Any]]) -> list[int]:
        plain = [{"role": m.get("role", "user"), "content": m.get("content") or ""} for m in messages]
        if getattr(self.tokenizer, "chat_template", None):
            text = self.tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=True)
        else:
            text = _render_simple_chat(plain)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def generate_ids(
        self, prompt_ids: list[int], *, max_tokens: int = 256, temperature: float = 0.7
    ) -> list[int]:
        import torch

        if self.seed is not None:
            torch.manual_seed(self.seed)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)
        pad_id = self.tokenizer.pad_token_id
        if pad_id is None:
            pad_id = self.tokenizer.eos_token_id
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "pad_token_id": pad_id,
            "eos_token_id": self.tokenizer.eos_token_id,
            "attention_mask": torch.ones_like(input_ids),
        }
        if self.ignore_eos:
            kwargs["min_new_tokens"] = max_tokens
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0)
        else:
            kwargs.update(do_sample=False)
        with torch.no_grad():
            output = self.model.generate(input_ids, **kwargs)
        return [int(t) for t in output[0, len(prompt_ids) :].tolist()]

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int = 4096,
        temperature: float = 0.7,
    ) -> Completion:
        prompt_ids = self.encode_messages(messages)
        new_ids = self.generate_ids(prompt_ids, max_tokens=max_tokens, temperature=temperature)
        eos = self.tokenizer.eos_token_id
        finish = "stop" if new_ids and new_ids[-1] == eos else "length"
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        return Completion(
            text=text,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(new_ids),
            finish_reason=finish,
            prompt_token_ids=prompt_ids,
            completion_token_ids=new_ids,
            model=type(self.model).__name__,
        )
