"""The litellm path, over real HTTP against a local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

import llm_fsm
from llm_fsm.errors import LLMAuthError, LLMContextWindowError, LLMRequestError, LLMUnavailableError
from llm_fsm.llm import LLMRequest
from tests.conftest import ROOT, reply
from tests.fake_openai import Hang, HTTPError

REQUEST = LLMRequest([{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}])


def client(server, **kwargs):
    options = {"api_key": "sk-test", "timeout": 5.0, "backoff": 0.01, "response_format": "none"} | kwargs
    return llm_fsm.LiteLLMClient("openai/test-model", api_base=server.url, **options)


QUIET_CALLS = """
import asyncio, logging, sys
import llm_fsm
from llm_fsm.llm import LLMRequest
if sys.argv[2] == "debug":  # an application that logs everything, to stderr: still nothing on stdout
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)
request = LLMRequest(messages=[{"role": "user", "content": "hi"}])
for base, stream in [(sys.argv[1], False), (sys.argv[1], True), ("http://127.0.0.1:9/v1", False)]:
    client = llm_fsm.LiteLLMClient("openai/x", api_base=base, api_key="sk-test", max_retries=0, stream=stream)
    for call in (lambda: client.complete(request), lambda: asyncio.run(client.acomplete(request))):
        try:
            call()
        except llm_fsm.LLMError:
            pass
"""


@pytest.mark.parametrize("logs", ["unconfigured", "debug"])
def test_failed_model_calls_print_nothing(fake_openai, logs):
    # A fresh process: litellm's settings are process-wide, and the banner comes once litellm is imported.
    fake_openai.add(HTTPError(500), HTTPError(400), HTTPError(401), HTTPError(503))
    code = [sys.executable, "-c", QUIET_CALLS, fake_openai.url, logs]
    out = subprocess.run(code, capture_output=True, text=True, check=True, cwd=ROOT, timeout=120)
    assert out.stdout == "", "the library printed on stdout"
    assert "Give Feedback" not in out.stderr
    if logs == "unconfigured":
        assert out.stderr == "", "with logging unconfigured, nothing reaches stderr either"
    else:  # litellm's records reach the application's handler
        assert "DEBUG:LiteLLM:" in out.stderr


def test_importing_and_constructing_does_not_import_litellm():
    code = "import sys, llm_fsm; llm_fsm.LiteLLMClient('openai/x'); import llm_fsm.cli; print('litellm' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_completion_over_http(fake_openai):
    fake_openai.add("hello there")
    response = client(fake_openai, temperature=0.2, seed=7).complete(REQUEST)
    assert response.text == "hello there"
    assert (response.usage.prompt_tokens, response.usage.total_tokens) == (50, 60)
    sent = fake_openai.requests[0]
    assert sent["messages"] == REQUEST.messages and sent["model"] == "test-model"
    assert sent["temperature"] == 0.2 and sent["seed"] == 7  # extra parameters pass through


def test_streaming_collects_text_and_usage(fake_openai):
    fake_openai.add("a streamed reply, in several chunks")
    response = client(fake_openai, stream=True).complete(REQUEST)
    assert response.text == "a streamed reply, in several chunks"
    assert response.usage.total_tokens == 60
    assert fake_openai.requests[0]["stream"] is True
    assert fake_openai.requests[0]["stream_options"] == {"include_usage": True}


def test_async_and_async_streaming(fake_openai):
    fake_openai.add("one", "two")

    async def both():
        return await client(fake_openai).acomplete(REQUEST), await client(fake_openai, stream=True).acomplete(REQUEST)

    plain, streamed = asyncio.run(both())
    assert (plain.text, streamed.text) == ("one", "two")


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_errors_are_retried_then_succeed(fake_openai, status):
    fake_openai.add(HTTPError(status), "recovered")
    assert client(fake_openai, max_retries=2).complete(REQUEST).text == "recovered"
    assert len(fake_openai.requests) == 2, "exactly one retry, no hidden retries underneath"


def test_retries_are_bounded(fake_openai):
    fake_openai.add(*[HTTPError(500)] * 10)
    with pytest.raises(LLMUnavailableError) as info:
        client(fake_openai, max_retries=2).complete(REQUEST)
    assert info.value.attempts == 3 and len(fake_openai.requests) == 3


def test_timeout_is_retried_and_reported(fake_openai):
    fake_openai.add(Hang(2.0), Hang(2.0))
    with pytest.raises(LLMUnavailableError):
        client(fake_openai, timeout=0.5, max_retries=1).complete(REQUEST)
    assert len(fake_openai.requests) == 2


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            HTTPError(
                401,
                {
                    "error": {
                        "message": "Incorrect API key provided",
                        "type": "invalid_request_error",
                        "code": "invalid_api_key",
                    }
                },
            ),
            LLMAuthError,
        ),
        (HTTPError(400, {"error": {"message": "bad request", "type": "invalid_request_error"}}), LLMRequestError),
        (HTTPError(404, {"error": {"message": "no such model"}}), LLMRequestError),
        (
            HTTPError(
                400,
                {
                    "error": {
                        "message": "This model's maximum context length is 10 tokens",
                        "code": "context_length_exceeded",
                    }
                },
            ),
            LLMContextWindowError,
        ),
    ],
)
def test_client_errors_are_never_retried(fake_openai, error, expected):
    fake_openai.add(error, "never served")
    with pytest.raises(expected):
        client(fake_openai, max_retries=3).complete(REQUEST)
    assert len(fake_openai.requests) == 1


def test_connection_refused_is_a_library_error():
    dead = llm_fsm.LiteLLMClient(
        "openai/x", api_base="http://127.0.0.1:9/v1", api_key="k", max_retries=1, backoff=0.01, timeout=2
    )
    with pytest.raises(LLMUnavailableError) as info:
        dead.complete(REQUEST)
    assert info.value.attempts == 2


def test_a_password_in_the_api_base_stays_out_of_errors_and_repr(fake_openai):
    dead = llm_fsm.LiteLLMClient("openai/x", api_base="http://ann:PW-91c2e7@127.0.0.1:9/v1", api_key="k", max_retries=0)
    with pytest.raises(LLMUnavailableError) as info:
        dead.complete(REQUEST)
    assert "PW-91c2e7" not in str(info.value) and "ann:***@127.0.0.1:9" in str(info.value)
    assert "PW-91c2e7" not in repr(dead)
    base = fake_openai.url.replace("http://", "http://ann:PW-91c2e7@")
    fake_openai.add(HTTPError(400, {"error": {"message": f"no model x at {base}", "type": "invalid_request_error"}}))
    with pytest.raises(LLMRequestError) as info:
        llm_fsm.LiteLLMClient("openai/x", api_base=base, api_key="k", max_retries=0).complete(REQUEST)
    assert "PW-91c2e7" not in str(info.value)


def test_strict_schema_is_requested_when_asked(fake_openai, signup):
    fake_openai.add(json.dumps(reply("ask_name", "Hi")))
    conv = llm_fsm.Conversation(signup, client(fake_openai, response_format="json_schema"))
    assert conv.start().message == "Hi"
    response_format = fake_openai.requests[0]["response_format"]
    assert response_format["type"] == "json_schema"
    schema = response_format["json_schema"]["schema"]
    assert schema["properties"]["transition"]["properties"]["target_state"]["enum"] == ["ask_email", "ask_name"]
    assert list(schema["properties"]) == ["transition", "message", "reasoning"]


def test_alternatives_at_the_root_go_to_a_server_of_your_own_and_a_provider_is_asked_for_json():
    from llm_fsm.llm.litellm_client import _format

    reply_or_call = {"anyOf": [{"type": "object"}, {"type": "object", "properties": {"tool_calls": {}}}]}
    assert _format("json_schema", reply_or_call, own_server=True)["json_schema"]["schema"] == reply_or_call
    # OpenAI's strict mode refuses a root that is not one object
    assert _format("json_schema", reply_or_call, own_server=False) == {"type": "json_object"}
    assert _format("json_schema", {"type": "object"}, own_server=False)["type"] == "json_schema"
    assert _format("none", reply_or_call, own_server=True) is None


def test_json_mode_when_asked(fake_openai):
    fake_openai.add("{}")
    client(fake_openai, response_format="json_object").complete(REQUEST)
    assert fake_openai.requests[0]["response_format"] == {"type": "json_object"}


def test_a_conversation_over_http_with_a_failed_turn_in_the_middle(fake_openai, signup):
    conv = llm_fsm.Conversation(signup, client(fake_openai, max_retries=0))
    fake_openai.add(json.dumps(reply("ask_name", "Hi, name?")))
    conv.start()
    before = conv.snapshot()
    fake_openai.add(HTTPError(500))
    with pytest.raises(LLMUnavailableError):
        conv.send("Ann")
    assert conv.snapshot() == before
    fake_openai.add("```json\n" + json.dumps(reply("ask_email", "Email?", name="Ann")) + "\n```")
    assert conv.send("Ann").state == "ask_email"


@pytest.mark.parametrize("stream", [False, True])
def test_a_text_reply_has_no_tool_calls(fake_openai, stream):
    fake_openai.add("just text")
    response = client(fake_openai, stream=stream).complete(REQUEST)
    assert (response.text, response.tool_calls, response.finish_reason) == ("just text", (), "stop")


def test_a_forced_tool_mode_does_not_import_litellm():
    code = (
        "import sys, llm_fsm; c = llm_fsm.LiteLLMClient('openai/x', tool_calling='native');"
        " print(c.tool_mode(), 'litellm' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "native False"


def test_a_streamed_call_is_priced_like_a_whole_one(fake_openai):
    # litellm prices the stream's usage chunk as it prices a whole response: the same cost either way
    fake_openai.add("hello there", "hello there")
    prices = {"input_cost_per_token": 1e-6, "output_cost_per_token": 2e-6}  # litellm's own per-call prices
    whole = client(fake_openai, **prices).complete(REQUEST).usage
    streamed = client(fake_openai, stream=True, **prices).complete(REQUEST).usage
    assert whole.cost == pytest.approx(50 * 1e-6 + 10 * 2e-6)
    assert streamed.cost == whole.cost and streamed.total_tokens == whole.total_tokens
