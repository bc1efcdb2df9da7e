"""Native function calling through litellm, over real HTTP against the local OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

import llm_fsm
from llm_fsm.errors import LLMUnavailableError
from llm_fsm.llm import LLMRequest, LLMResponse, StreamReader, ToolCallParts, ToolCallRequest, Usage
from tests.fake_openai import HTTPError, ToolCalls

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a customer up",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}
MESSAGES = [{"role": "system", "content": "sys"}, {"role": "user", "content": "weather in Paris?"}]
REQUEST = LLMRequest(MESSAGES, tools=(WEATHER, LOOKUP))
HOW = ["plain", "stream", "async", "async-stream"]


def client(server, **kwargs):
    options = {
        "api_key": "sk-test",
        "timeout": 5.0,
        "backoff": 0.01,
        "response_format": "none",
        "tool_calling": "native",
    } | kwargs
    return llm_fsm.LiteLLMClient("openai/test", api_base=server.url, **options)


def call(model, request, how):
    """One call made ``how``; returns the text deltas yielded (streamed forms) and the response."""
    if how == "plain":
        return [], model.complete(request)
    if how == "async":
        return [], asyncio.run(model.acomplete(request))
    if how == "stream":
        items = list(model.stream_complete(request))
    else:

        async def collect():
            return [item async for item in model.astream_complete(request)]

        items = asyncio.run(collect())
    assert isinstance(items[-1], LLMResponse) and all(isinstance(i, str) for i in items[:-1])
    return items[:-1], items[-1]


# -- what is sent ---------------------------------------------------------------------------------


def test_native_mode_sends_the_tools_and_reads_one_call(fake_openai):
    fake_openai.add(ToolCalls([("get_weather", {"city": "Paris"})]))
    response = client(fake_openai).complete(REQUEST)
    assert response.tool_calls == (ToolCallRequest("call_fake_0", "get_weather", '{"city": "Paris"}'),)
    assert (response.text, response.finish_reason) == ("", "tool_calls")
    sent = fake_openai.requests[0]
    assert sent["tools"] == [WEATHER, LOOKUP]
    assert "tool_choice" not in sent, "no tool_choice unless the request sets one"
    assert "_skip_mcp_handler" not in sent, "litellm's internal flag stays inside litellm"


@pytest.mark.parametrize("choice", ["auto", "required", "none"])
def test_tool_choice_is_sent_when_set(fake_openai, choice):
    fake_openai.add(ToolCalls([("get_weather", {"city": "Paris"})]))
    client(fake_openai).complete(LLMRequest(MESSAGES, tools=(WEATHER,), tool_choice=choice))
    assert fake_openai.requests[0]["tool_choice"] == choice


@pytest.mark.parametrize("how", HOW)
def test_json_mode_sends_no_tools(fake_openai, how):
    fake_openai.add('{"message": "hi"}')
    request = LLMRequest(MESSAGES, tools=(WEATHER,), tool_choice="auto")
    _, response = call(client(fake_openai, tool_calling="json", stream=how.endswith("stream")), request, how)
    assert response.text == '{"message": "hi"}' and response.tool_calls == ()
    assert "tools" not in fake_openai.requests[0] and "tool_choice" not in fake_openai.requests[0]


def test_no_tools_in_the_request_sends_none_in_native_mode(fake_openai):
    fake_openai.add("plain text")
    assert client(fake_openai).complete(LLMRequest(MESSAGES)).tool_calls == ()
    assert "tools" not in fake_openai.requests[0]


def test_auto_mode_with_a_model_litellm_does_not_know_uses_json(fake_openai):
    fake_openai.add("text")
    model = client(fake_openai, tool_calling="auto")
    model.complete(REQUEST)
    assert model.tool_mode() == "json" and "tools" not in fake_openai.requests[0]


# -- what comes back --------------------------------------------------------------------------------


@pytest.mark.parametrize("how", HOW)
def test_several_calls_in_one_reply(fake_openai, how):
    fake_openai.add(ToolCalls([("get_weather", {"city": "Paris"}), ("lookup", {"q": "Ann Smith"})], text="Checking."))
    deltas, response = call(client(fake_openai, stream=how.endswith("stream")), REQUEST, how)
    assert response.tool_calls == (
        ToolCallRequest("call_fake_0", "get_weather", '{"city": "Paris"}'),
        ToolCallRequest("call_fake_1", "lookup", '{"q": "Ann Smith"}'),
    )
    assert response.text == "Checking." and response.finish_reason == "tool_calls"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (50, 10, 60)
    if how.endswith("stream"):
        assert "".join(deltas) == "Checking.", "text deltas are yielded as before; calls only in the response"
        assert fake_openai.requests[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("how", ["stream", "async-stream"])
def test_interleaved_fragments_of_parallel_calls_are_put_together_by_index(fake_openai, how):
    calls = [("get_weather", {"city": "Rio de Janeiro"}), ("lookup", {"q": "a much longer query string"})]
    fake_openai.add(ToolCalls(calls, interleaved=True, size=3))
    _, response = call(client(fake_openai, stream=True), REQUEST, how)
    assert [(c.name, json.loads(c.arguments)) for c in response.tool_calls] == [(n, a) for n, a in calls]


@pytest.mark.parametrize("how", HOW)
def test_invalid_json_arguments_are_passed_through_as_written(fake_openai, how):
    fake_openai.add(ToolCalls([("lookup", "{q: 'Ann',"), ("get_weather", "")]))
    _, response = call(client(fake_openai, stream=how.endswith("stream")), REQUEST, how)
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("lookup", "{q: 'Ann',"), ("get_weather", "")]


@pytest.mark.parametrize("how", HOW)
def test_finish_reasons(fake_openai, how):
    stream = how.endswith("stream")
    fake_openai.add(
        ToolCalls([("get_weather", {"city": "Paris"})]),
        ToolCalls([("get_weather", {"city": "Paris"})], finish_reason="stop"),  # as some local servers say it
        ToolCalls([("get_weather", '{"city": "Par')], finish_reason="length"),
        "just text",
    )
    model = client(fake_openai, stream=stream)
    finishes = [call(model, REQUEST, how)[1] for _ in range(4)]
    assert [r.finish_reason for r in finishes] == ["tool_calls", "tool_calls", "length", "stop"]
    assert finishes[2].tool_calls[0].arguments == '{"city": "Par', "a cut call is reported, with what arrived"
    assert finishes[3].tool_calls == ()


@pytest.mark.parametrize("how", ["plain", "stream"])
def test_calls_without_ids_get_one(fake_openai, how):
    fake_openai.add(ToolCalls([("get_weather", {"city": "Paris"}), ("lookup", {"q": "x"})], ids=False))
    _, response = call(client(fake_openai, stream=how == "stream"), REQUEST, how)
    ids = [c.id for c in response.tool_calls]
    assert all(ids) and len(set(ids)) == 2
    if how == "stream":
        assert ids == ["call_0", "call_1"]  # ours; unstreamed, litellm makes up uuids itself


def test_a_failed_attempt_before_any_call_is_retried(fake_openai):
    fake_openai.add(HTTPError(503), ToolCalls([("get_weather", {"city": "Paris"})]))
    response = client(fake_openai, stream=True, max_retries=1).complete(REQUEST)
    assert response.tool_calls[0].name == "get_weather" and len(fake_openai.requests) == 2
    assert all(r["tools"] == [WEATHER, LOOKUP] for r in fake_openai.requests)


# -- a round trip: the calls go back to the model with their results -----------------------------------


@pytest.mark.parametrize("how", HOW)
def test_a_round_trip_reaches_the_server_intact(fake_openai, how):
    fake_openai.add(
        ToolCalls([("get_weather", {"city": "Paris"}), ("lookup", {"q": "Ann"})]),
        '{"message": "Sunny in Paris, Ann."}',
    )
    model = client(fake_openai, stream=how.endswith("stream"))
    _, first = call(model, REQUEST, how)
    assistant = {
        "role": "assistant",
        "content": first.text or None,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in first.tool_calls
        ],
    }
    results = [
        {"role": "tool", "tool_call_id": "call_fake_0", "content": '{"sky": "sunny", "celsius": 21}'},
        {"role": "tool", "tool_call_id": "call_fake_1", "content": "Ann Smith, customer since 2019 — <b>VIP</b>"},
    ]
    messages = [*MESSAGES, assistant, *results]
    _, second = call(model, LLMRequest(messages, tools=REQUEST.tools), how)
    assert second.text == '{"message": "Sunny in Paris, Ann."}' and second.tool_calls == ()

    sent = fake_openai.requests[1]["messages"]
    # litellm leaves out an assistant message's "content": null (OpenAI accepts tool_calls alone); the rest is as built
    assert sent == [{k: v for k, v in m.items() if v is not None} for m in messages]
    assert fake_openai.requests[1]["tools"] == [WEATHER, LOOKUP]
    assert messages[2]["content"] is None, "the caller's messages are not changed"
    assert (first.usage + second.usage).total_tokens == 120, "usage is per call; the caller sums it"


# -- tool_mode -----------------------------------------------------------------------------------------


class CountingLitellm:
    def __init__(self, answer):
        self.answer = answer
        self.asked = 0

    def supports_function_calling(self, model):
        self.asked += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(("answer", "mode"), [(True, "native"), (False, "json"), (ValueError("unmapped"), "json")])
def test_auto_asks_litellm_once(answer, mode):
    model = llm_fsm.LiteLLMClient("openai/whatever")
    model._litellm = fake = CountingLitellm(answer)
    assert model.tool_mode() == mode and model.tool_mode() == mode
    assert fake.asked == 1


@pytest.mark.parametrize("forced", ["native", "json"])
def test_a_forced_mode_does_not_ask_litellm(forced):
    model = llm_fsm.LiteLLMClient("openai/gpt-4o-mini", tool_calling=forced)
    model._litellm = fake = CountingLitellm(ValueError("must not be asked"))
    assert model.tool_mode() == forced and fake.asked == 0


@pytest.mark.parametrize(
    ("model", "mode"),
    [("openai/test", "json"), ("openai/whatever", "json"), ("openai/gpt-4o-mini", "native"), ("ollama/llama3", "json")],
)
def test_auto_follows_litellms_model_map(model, mode):
    assert llm_fsm.LiteLLMClient(model, api_base="http://127.0.0.1:9/v1").tool_mode() == mode


# -- stream accumulation, with hand-made chunks ------------------------------------------------------


def fragment(index=None, id=None, name=None, arguments=None):
    return SimpleNamespace(index=index, id=id, function=SimpleNamespace(name=name, arguments=arguments))


def chunk(*, content=None, tool_calls=None, finish=None, usage=None):
    delta = SimpleNamespace(content=content, tool_calls=tool_calls)
    choices = [SimpleNamespace(delta=delta, finish_reason=finish)] if delta.content or tool_calls or finish else []
    return SimpleNamespace(choices=choices, usage=usage)


def test_fragments_without_an_index_follow_their_id():
    parts = ToolCallParts()
    parts.add([fragment(id="a", name="f", arguments="")])
    parts.add([fragment(arguments='{"x":')])
    parts.add([fragment(id="b", name="g", arguments="[1")])
    parts.add([fragment(arguments="]")])
    parts.add([fragment(id="a", arguments=" 1}")])  # a server that repeats the id goes back to its call
    assert parts.finished() == (ToolCallRequest("a", "f", '{"x": 1}'), ToolCallRequest("b", "g", "[1]"))


def test_repeated_names_and_ids_are_not_doubled_and_parsed_arguments_become_text():
    parts = ToolCallParts()
    parts.add([fragment(index=1, id="b", name="g", arguments={"k": "é"})])
    parts.add([fragment(index=0, id="a", name="f", arguments="{}")])
    parts.add([fragment(index=0, id="a", name="f", arguments=None)])
    assert parts.finished() == (ToolCallRequest("a", "f", "{}"), ToolCallRequest("b", "g", '{"k": "é"}'))


def test_a_stream_of_calls_that_ends_without_a_finish_reason_is_an_error():
    chunks = [chunk(tool_calls=[fragment(index=0, id="a", name="f", arguments='{"x": ')])]
    model = llm_fsm.LiteLLMClient("openai/test")
    with pytest.raises(LLMUnavailableError, match="ended before the reply was complete"):
        list(StreamReader(model, chunks))


def test_a_hand_made_stream_puts_text_and_calls_together():
    usage = SimpleNamespace(prompt_tokens=5, completion_tokens=3, total_tokens=8)
    chunks = [
        chunk(content="One "),
        chunk(tool_calls=[fragment(index=0, id="a", name="f", arguments="")]),
        chunk(content="moment."),
        chunk(tool_calls=[fragment(index=0, arguments='{"x": 1}')]),
        chunk(finish="tool_calls"),
        chunk(usage=usage),
    ]
    items = list(StreamReader(llm_fsm.LiteLLMClient("openai/test"), chunks))
    assert items[:-1] == ["One ", "moment."]
    assert items[-1] == LLMResponse(
        "One moment.", Usage(5, 3, 8), "openai/test", "tool_calls", (ToolCallRequest("a", "f", '{"x": 1}'),)
    )


def test_the_cli_provider_options_reach_the_client(fake_openai, tmp_path):
    from typer.testing import CliRunner

    from llm_fsm.cli import app
    from tests.conftest import SIGNUP, reply

    definition = tmp_path / "signup.json"
    definition.write_text(json.dumps(SIGNUP))
    fake_openai.add(json.dumps(reply("ask_name", "Hi! Name?")))
    args = ["run", str(definition), "-m", "openai/test", "--api-base", fake_openai.url, "--api-key", "sk-test"]
    args += ["--response-format", "json_schema", "--max-tokens", "77", "--tool-calling", "json"]
    result = CliRunner().invoke(app, args, input="")
    assert result.exit_code == 0, result.output
    sent = fake_openai.requests[0]
    assert sent["max_tokens"] == 77 and sent["response_format"]["type"] == "json_schema"
