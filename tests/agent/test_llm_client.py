import pytest
from scripted_llm import error, raw, reply

from agent.llm import LLMConnectionError, LLMHTTPError, LLMResponseError, OpenAIChatClient


def _client(server, **kwargs):
    kwargs = {"max_retries": 3, "backoff_s": 0.01, "backoff_max_s": 0.05, **kwargs}
    return OpenAIChatClient(server.url, "test-model", **kwargs)


def test_completion_text_usage_and_request_body(openai_server):
    server = openai_server([reply("hello", prompt_tokens=42, completion_tokens=7)])
    client = _client(server, api_key="sk-test")

    completion = client.complete([{"role": "user", "content": "hi"}], max_tokens=64, temperature=0.2)

    assert (
        completion.text,
        completion.prompt_tokens,
        completion.completion_tokens,
        completion.finish_reason,
    ) == ("hello", 42, 7, "stop")
    assert server.paths == ["/v1/chat/completions"]
    assert server.requests[0] == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "temperature": 0.2,
    }
    assert server.headers[0]["authorization"] == "Bearer sk-test"


def test_api_key_comes_from_environment(openai_server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("KERNELCOURT_LLM_API_KEY", "sk-env")
    server = openai_server([reply("ok")])

    _client(server).complete([{"role": "user", "content": "hi"}])

    assert server.headers[0]["authorization"] == "Bearer sk-env"


def test_base_url_without_v1_gets_it(openai_server):
    server = openai_server([reply("ok")])
    client = OpenAIChatClient(server.url.removesuffix("/v1") + "/", "m", max_retries=0)

    assert client.complete([{"role": "user", "content": "x"}]).text == "ok"
    assert server.paths == ["/v1/chat/completions"]


def test_server_errors_are_retried_then_succeed(openai_server):
    server = openai_server([error(500), error(429), error(503), reply("finally")])
    client = _client(server)

    completion = client.complete([{"role": "user", "content": "hi"}])

    assert completion.text == "finally"
    assert client.attempts == 4
    assert len(server.requests) == 4


def test_retries_give_up_with_the_last_status(openai_server):
    server = openai_server([error(502)] * 5)
    client = _client(server, max_retries=2)

    with pytest.raises(LLMHTTPError, match="HTTP 502") as info:
        client.complete([{"role": "user", "content": "hi"}])

    assert info.value.status_code == 502
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(openai_server):
    server = openai_server([error(400, '{"error": "bad request: unknown model"}'), reply("never")])
    client = _client(server)

    with pytest.raises(LLMHTTPError, match="HTTP 400: .*unknown model"):
        client.complete([{"role": "user", "content": "hi"}])

    assert len(server.requests) == 1


def test_slow_reply_past_the_timeout_is_retried(openai_server):
    server = openai_server([reply("too late", delay=1.5), reply("in time")])
    client = _client(server, timeout_s=0.5)

    completion = client.complete([{"role": "user", "content": "hi"}])

    assert completion.text == "in time"
    assert client.attempts == 2


def test_slow_replies_exhaust_retries_as_connection_error(openai_server):
    server = openai_server([reply("late", delay=1.0), reply("late", delay=1.0)])
    client = _client(server, timeout_s=0.3, max_retries=1)

    with pytest.raises(LLMConnectionError, match=r"timed out .* \(after 2 attempts\)"):
        client.complete([{"role": "user", "content": "hi"}])


def test_unreachable_endpoint_is_a_connection_error():
    import socket

    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIChatClient(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_s=0.01)

    with pytest.raises(
        LLMConnectionError, match=rf"cannot reach http://127.0.0.1:{port}/v1/chat/completions"
    ):
        client.complete([{"role": "user", "content": "hi"}])
    assert client.attempts == 2


def test_non_json_body_is_a_response_error(openai_server):
    server = openai_server([raw("<html>gateway</html>")])

    with pytest.raises(LLMResponseError, match="not a chat completion"):
        _client(server).complete([{"role": "user", "content": "hi"}])


def test_native_tool_calls_are_parsed_and_tools_sent(openai_server):
    server = openai_server(
        [reply(tool_calls=[{"id": "call_1", "name": "verify", "arguments": '{"source": "x"}'}])]
    )
    tools = [{"type": "function", "function": {"name": "verify", "parameters": {"type": "object"}}}]

    completion = _client(server).complete([{"role": "user", "content": "hi"}], tools=tools)

    assert completion.text == ""
    assert [(c.id, c.name, c.arguments) for c in completion.tool_calls] == [
        ("call_1", "verify", '{"source": "x"}')
    ]
    assert completion.finish_reason == "tool_calls"
    assert server.requests[0]["tools"] == tools
    assert server.requests[0]["tool_choice"] == "auto"


def test_reasoning_content_is_kept_apart_from_the_answer(openai_server):
    server = openai_server([reply("answer", reasoning="long chain of thought")])

    completion = _client(server).complete([{"role": "user", "content": "hi"}])

    assert (completion.text, completion.reasoning) == ("answer", "long chain of thought")
