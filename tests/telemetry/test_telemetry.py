"""OpenTelemetry traces of turns: the span tree, its attributes, and what it never holds."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import llm_fsm
from llm_fsm import Break, Hooks, telemetry
from llm_fsm.errors import LLMUnavailableError
from llm_fsm.store import advance, open_store
from llm_fsm.testing import ScriptedLLM, reply, tool_calls
from tests.conftest import ROOT
from tests.fake_openai import HTTPError

USER_TEXT = "I am Zelda Quux"  # what the user types: never in a span unless content is on
NAME = "Zelda"
PASSWORD = "hunter2-Xyzzy"  # a secret: never in a span, content on or off
FLOW: dict[str, Any] = {
    "name": "signup",
    "initial_state": "ask_name",
    "tools": {"lookup_member": {"description": "Find a member by name", "result_key": "member"}},
    "states": {
        "ask_name": {
            "purpose": "Ask the user's name",
            "required_context_keys": ["name"],
            "tools": ["lookup_member"],
            "transitions": [{"target_state": "ask_password", "conditions": [{"requires_context_keys": ["name"]}]}],
        },
        "ask_password": {
            "purpose": "Ask for a password",
            "required_context_keys": ["password"],
            "transitions": [{"target_state": "done", "conditions": [{"requires_context_keys": ["password"]}]}],
        },
        "done": {"purpose": "Say goodbye"},
    },
}
OPENING = reply("ask_name", "Hello! Your name?")
NAMED = reply("ask_password", f"Thanks {NAME}! Now a password, please.", name=NAME)


def flow(**states: dict[str, Any]) -> llm_fsm.FSMDefinition:
    data = json.loads(json.dumps(FLOW))
    for state, fields in states.items():
        data["states"][state].update(fields)
    return llm_fsm.load(data)


class App:
    """The application's own tracer (its spans inside tools, handlers and checks), on the test's provider."""

    tracer: Any = trace.NoOpTracer()

    @classmethod
    def span(cls, name: str) -> Any:
        return cls.tracer.start_as_current_span(name)


def member_hooks() -> Hooks:
    hooks = Hooks()

    @hooks.tool()
    def lookup_member(name: str) -> dict[str, Any]:
        with App.span("db query"):
            return {"found": True, "since": 2019}

    return hooks


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans of the test's turns: a provider of its own, never the global one (set once per process)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.set_tracer_provider(provider)
    App.tracer = provider.get_tracer("app")
    yield exporter
    App.tracer = trace.NoOpTracer()
    telemetry.set_tracer_provider(None)


@pytest.fixture(autouse=True)
def content_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(telemetry.CONTENT_VARIABLE, raising=False)


def with_tool(hooks: Hooks | None = None) -> Hooks:
    """``hooks`` with the definition's tool (``lookup_member``) registered, unless they have their own."""
    hooks = hooks if hooks is not None else Hooks()
    hooks.tools.setdefault("lookup_member", member_hooks().tools["lookup_member"])
    return hooks


def fresh(definition: llm_fsm.FSMDefinition, *replies: Any, hooks: Hooks | None = None) -> llm_fsm.Conversation:
    """A conversation in its first state, with no opening (so a state's checks run only on the turn sent)."""
    return llm_fsm.Conversation(definition, ScriptedLLM(replies), hooks=with_tool(hooks), id="conv-1")


def started(definition: llm_fsm.FSMDefinition, *replies: Any, hooks: Hooks | None = None) -> llm_fsm.Conversation:
    conversation = fresh(definition, OPENING, *replies, hooks=hooks)
    conversation.start()
    return conversation


def turns(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent ")]


def children(exporter: InMemorySpanExporter, parent: ReadableSpan) -> list[ReadableSpan]:
    found = [s for s in exporter.get_finished_spans() if s.parent and s.parent.span_id == parent.context.span_id]
    return sorted(found, key=lambda s: s.start_time or 0)


def tree(exporter: InMemorySpanExporter, root: ReadableSpan) -> list[Any]:
    """``root``'s name and its children's trees, in the order they started."""
    kids = children(exporter, root)
    return [root.name, *[tree(exporter, kid) if children(exporter, kid) else kid.name for kid in kids]]


def recorded(exporter: InMemorySpanExporter) -> str:
    """Everything the spans hold, as text: names, attribute values, events and their values, statuses."""
    parts = []
    for span in exporter.get_finished_spans():
        parts += [span.name, str(span.status.description), *map(str, span.attributes.values())]
        for event in span.events:
            parts += [event.name, *map(str, event.attributes.values())]
    return "\n".join(parts)


# -- the span tree ---------------------------------------------------------------------------------


def test_a_turn_is_one_span_with_a_child_span_per_model_call(spans):
    conversation = started(flow(), NAMED)
    spans.clear()
    result = conversation.send(USER_TEXT)
    (turn,) = turns(spans)
    assert tree(spans, turn) == ["invoke_agent signup", "chat"]
    assert turn.kind == SpanKind.INTERNAL and turn.parent is None
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.agent.name"] == turn.attributes["llm_fsm.definition.models"] == "signup"
    assert turn.attributes["gen_ai.conversation.id"] == "conv-1"
    assert turn.attributes["llm_fsm.turn.kind"] == "message" and turn.attributes["llm_fsm.turn.runner"] == 1
    assert turn.attributes["llm_fsm.state.before"] == "ask_name"
    assert turn.attributes["llm_fsm.state.after"] == "ask_password"
    assert turn.attributes["llm_fsm.transition"] == "ask_name -> ask_password"
    assert turn.attributes["llm_fsm.llm_calls"] == 1 and turn.attributes["llm_fsm.rejections"] == 0
    assert turn.attributes["gen_ai.usage.input_tokens"] == result.usage.prompt_tokens > 0
    (chat,) = children(spans, turn)
    assert chat.kind == SpanKind.CLIENT
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "_OTHER"  # a test double: no provider to name
    assert chat.attributes["gen_ai.response.model"] == "scripted"
    assert chat.attributes["gen_ai.usage.output_tokens"] == result.usage.completion_tokens > 0
    assert chat.attributes["llm_fsm.call.purpose"] == "reply" and chat.attributes["llm_fsm.stream"] is False
    assert chat.attributes["gen_ai.conversation.id"] == "conv-1"
    text = recorded(spans)
    assert USER_TEXT not in text and NAME not in text and result.message not in text


def test_the_turn_span_nests_under_the_applications_current_span(spans):
    conversation = started(flow(), NAMED)
    with App.span("POST /messages") as request:
        conversation.send(USER_TEXT)
    (turn,) = [s for s in turns(spans) if s.attributes["llm_fsm.turn.kind"] == "message"]
    assert turn.parent is not None and turn.parent.span_id == request.get_span_context().span_id


def test_the_opening_turn_and_an_unchanged_state_say_stay(spans):
    started(flow())
    (turn,) = turns(spans)
    assert turn.attributes["llm_fsm.turn.kind"] == "opening" and turn.attributes["llm_fsm.transition"] == "stay"


def test_async_turns_nest_their_calls_under_their_own_turn(spans):
    async def two_conversations() -> None:
        one = llm_fsm.Conversation(flow(), ScriptedLLM([OPENING, NAMED]), hooks=with_tool(), id="a")
        two = llm_fsm.Conversation(flow(), ScriptedLLM([OPENING, NAMED]), hooks=with_tool(), id="b")
        await asyncio.gather(one.astart(), two.astart())
        await asyncio.gather(one.asend(USER_TEXT), two.asend(USER_TEXT))

    asyncio.run(two_conversations())
    assert len(turns(spans)) == 4
    for turn in turns(spans):
        (chat,) = children(spans, turn)
        assert chat.attributes["gen_ai.conversation.id"] == turn.attributes["gen_ai.conversation.id"]
        assert chat.context.trace_id == turn.context.trace_id


@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_streamed_turn_has_a_streamed_model_call(spans, form):
    conversation = started(flow(), NAMED)
    spans.clear()
    if form == "sync":
        events = list(conversation.stream(USER_TEXT))
    else:

        async def collect() -> list[Any]:
            return [event async for event in conversation.astream(USER_TEXT)]

        events = asyncio.run(collect())
    assert isinstance(events[-1], llm_fsm.TurnResult) and len(events) > 2  # the message came in pieces
    (turn,) = turns(spans)
    (chat,) = children(spans, turn)
    assert chat.attributes["llm_fsm.stream"] is True and chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert turn.attributes["llm_fsm.state.after"] == "ask_password"


def test_a_stream_closed_early_ends_its_spans_as_abandoned(spans):
    conversation = started(flow(), NAMED)
    spans.clear()
    stream = conversation.stream(USER_TEXT)
    next(stream)
    stream.close()
    (turn,) = turns(spans)
    assert turn.attributes["llm_fsm.turn.abandoned"] is True and "llm_fsm.state.after" not in turn.attributes
    assert conversation.state == "ask_name"  # the turn changed nothing
    assert [s.name for s in children(spans, turn)] == ["chat"]


class InstrumentedLLM(ScriptedLLM):
    """A client whose HTTP layer makes spans of its own (as an instrumented HTTP client does)."""

    def complete(self, request: Any) -> Any:
        with App.span("POST /chat/completions"):
            return super().complete(request)


@pytest.mark.parametrize("form", ["sync", "async", "stream", "astream"])
def test_spans_made_during_a_model_call_nest_under_its_span(spans, form):
    conversation = llm_fsm.Conversation(flow(), InstrumentedLLM([NAMED]), hooks=with_tool())
    if form == "sync":
        conversation.send(USER_TEXT)
    elif form == "async":
        asyncio.run(conversation.asend(USER_TEXT))
    elif form == "stream":
        list(conversation.stream(USER_TEXT))
    else:

        async def collect() -> None:
            async for _ in conversation.astream(USER_TEXT):
                pass

        asyncio.run(collect())
    (turn,) = turns(spans)
    assert tree(spans, turn) == ["invoke_agent signup", ["chat", "POST /chat/completions"]]


def test_a_rejected_reply_and_its_correction_are_two_calls_of_one_turn(spans):
    conversation = started(flow(), reply("nowhere", "Off we go!"), NAMED)
    spans.clear()
    conversation.send(USER_TEXT)
    (turn,) = turns(spans)
    first, second = children(spans, turn)
    assert [first.attributes["llm_fsm.call.purpose"], second.attributes["llm_fsm.call.purpose"]] == [
        "reply",
        "correction",
    ]
    assert [first.attributes["llm_fsm.call.number"], second.attributes["llm_fsm.call.number"]] == [1, 2]
    assert turn.attributes["llm_fsm.rejections"] == 1 and turn.attributes["llm_fsm.llm_calls"] == 2
    (kind,) = turn.attributes["llm_fsm.rejection.kinds"]
    (event,) = turn.events
    assert event.name == "llm_fsm.rejection" and event.attributes["kind"] == kind
    assert "reason" not in event.attributes  # the reason may quote values: content only


def test_a_reply_never_accepted_ends_in_the_fallback(spans):
    conversation = started(flow(), "not json", "still not json")
    spans.clear()
    conversation.send(USER_TEXT)
    (turn,) = turns(spans)
    assert turn.attributes["llm_fsm.fallback"] is True
    assert turn.attributes["llm_fsm.rejection.kinds"] == ("format", "format")


@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_tool_call_is_a_span_between_the_model_calls_and_the_tools_own_spans_nest_in_it(spans, form):
    ask = tool_calls(("lookup_member", {"name": NAME}))
    conversation = started(flow(), ask, NAMED, hooks=member_hooks())
    spans.clear()
    if form == "sync":
        conversation.send(USER_TEXT)
    else:
        asyncio.run(conversation.asend(USER_TEXT))
    (turn,) = turns(spans)
    assert tree(spans, turn) == ["invoke_agent signup", "chat", ["execute_tool lookup_member", "db query"], "chat"]
    chat, tool, after = children(spans, turn)
    assert chat.attributes["llm_fsm.tool_calls.requested"] == 1
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("tool_calls",)
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert tool.attributes["gen_ai.tool.name"] == "lookup_member" and tool.attributes["gen_ai.tool.call.id"]
    assert tool.attributes["gen_ai.tool.description"] == "Find a member by name"
    assert tool.status.status_code == StatusCode.UNSET
    assert after.attributes["llm_fsm.call.purpose"] == "tool_results"
    assert turn.attributes["llm_fsm.tool_calls"] == 1
    assert "2019" not in recorded(spans)  # a tool's result is content


def test_a_tool_that_raises_is_an_error_span_and_the_turn_goes_on(spans):
    hooks = Hooks()

    @hooks.tool()
    def lookup_member(name: str) -> dict[str, Any]:
        raise ConnectionError(f"no route to the members of {name}")

    conversation = started(flow(), tool_calls(("lookup_member", {"name": NAME})), NAMED, hooks=hooks)
    spans.clear()
    conversation.send(USER_TEXT)
    (turn,) = turns(spans)
    tool = children(spans, turn)[1]
    assert tool.status.status_code == StatusCode.ERROR and tool.attributes["error.type"] == "ConnectionError"
    (event,) = tool.events
    assert event.name == "exception" and "exception.message" not in event.attributes  # its text may hold values
    assert event.attributes["exception.type"].endswith("ConnectionError")
    assert turn.status.status_code == StatusCode.UNSET and turn.attributes["llm_fsm.rejection.kinds"] == ("tool",)
    assert NAME not in recorded(spans)


def test_a_check_that_fails_retries_and_each_check_is_a_span(spans):
    hooks = Hooks()
    verdicts = iter([False, True])

    @hooks.check("polite")
    def polite(*, message: str) -> bool:
        with App.span("moderation api"):
            return next(verdicts)

    definition = flow(ask_name={"checks": [{"kind": "python", "name": "polite", "description": "polite"}]})
    fresh(definition, NAMED, NAMED, hooks=hooks).send(USER_TEXT)
    (turn,) = turns(spans)
    assert tree(spans, turn) == [
        "invoke_agent signup",
        "chat",
        ["check polite", "moderation api"],
        "chat",
        ["check polite", "moderation api"],
    ]
    _, failed, retry, passed = children(spans, turn)
    assert failed.attributes["llm_fsm.check.passed"] is False and passed.attributes["llm_fsm.check.passed"] is True
    assert failed.attributes["llm_fsm.check.kind"] == "python" and "llm_fsm.check.reason" not in failed.attributes
    assert retry.attributes["llm_fsm.call.purpose"] == "refinement"
    assert turn.attributes["llm_fsm.rejection.kinds"] == ("check",)


def test_a_judge_call_nests_under_its_check(spans):
    judge = {"kind": "judge", "rubric": "The message is friendly", "description": "friendly"}
    fresh(flow(ask_name={"checks": [judge]}), NAMED, {"pass": True, "reason": "nice"}).send(USER_TEXT)
    (turn,) = turns(spans)
    assert tree(spans, turn) == ["invoke_agent signup", "chat", ["check friendly", "chat"]]
    check = children(spans, turn)[1]
    (judge_call,) = children(spans, check)
    assert judge_call.attributes["llm_fsm.call.kind"] == "judge" and judge_call.attributes["llm_fsm.call.number"] == 2


@pytest.mark.parametrize("form", ["sync", "async"])
def test_a_break_pauses_in_a_handler_span_and_the_resume_is_a_turn_of_its_own(spans, form):
    hooks = Hooks()

    if form == "sync":

        @hooks.on("state_enter", states="ask_password")
        def ask_staff(*, context: Any) -> None:
            with App.span("notify staff"):
                raise Break("a person checks new members", {"name": context["name"]})

    else:

        @hooks.on("state_enter", states="ask_password")
        async def ask_staff(*, context: Any) -> None:
            await asyncio.sleep(0)
            with App.span("notify staff"):
                raise Break("a person checks new members", {"name": context["name"]})

    conversation = fresh(flow(), NAMED, reply("ask_password", "Welcome! A password, please."), hooks=hooks)
    if form == "sync":
        conversation.send(USER_TEXT)
        conversation.resume(conversation.pending.token, {"approved": True})
    else:

        async def both() -> None:
            await conversation.asend(USER_TEXT)
            await conversation.aresume(conversation.pending.token, {"approved": True})

        asyncio.run(both())
    paused, resumed = turns(spans)
    assert tree(spans, paused) == ["invoke_agent signup", "chat", ["handler ask_staff", "notify staff"]]
    handler = children(spans, paused)[1]
    assert handler.attributes["llm_fsm.handler.break"] is True and handler.status.status_code == StatusCode.UNSET
    assert handler.attributes["llm_fsm.handler.timing"] == "state_enter"
    assert paused.attributes["llm_fsm.paused"] is True and paused.attributes["llm_fsm.status"] == "paused"
    assert paused.attributes["llm_fsm.pause.kind"] == "break"
    assert paused.attributes["llm_fsm.pause.handler"] == "ask_staff"
    assert paused.attributes["llm_fsm.pause.timing"] == "state_enter"
    assert resumed.attributes["llm_fsm.turn.kind"] == "resume" and resumed.attributes["llm_fsm.resume.kind"] == "break"
    assert resumed.attributes["llm_fsm.resume.handler"] == "ask_staff"
    assert [s.name for s in children(spans, resumed)] == ["chat"]  # the handler that paused is not run again
    assert NAME not in recorded(spans)


def test_a_handler_span_names_the_state_it_ran_in_and_the_target(spans):
    hooks = Hooks()
    hooks.on("state_enter", states="ask_password")(lambda: None)
    conversation = started(flow(), NAMED, hooks=hooks)
    spans.clear()
    conversation.send(USER_TEXT)
    (turn,) = turns(spans)
    (handler,) = [s for s in children(spans, turn) if s.name.startswith("handler ")]
    assert (handler.attributes["llm_fsm.state"], handler.attributes["llm_fsm.target"]) == (
        "ask_password",
        "ask_password",
    )


def test_a_handler_delta_names_its_keys_and_a_failing_handler_is_an_error(spans):
    hooks = Hooks()

    @hooks.on("context_update", keys="name")
    def shout(*, update: Any) -> dict[str, Any]:
        return {"loud": update["name"].upper()}

    @hooks.on("state_enter", states="ask_password", policy="continue")
    def flaky() -> None:
        raise ValueError("the mail server said no")

    conversation = started(flow(), NAMED, hooks=hooks)
    spans.clear()
    conversation.send(USER_TEXT)
    (turn,) = turns(spans)
    _, shout_span, flaky_span = children(spans, turn)
    assert shout_span.attributes["llm_fsm.handler.keys"] == ("loud",)
    assert flaky_span.status.status_code == StatusCode.ERROR and flaky_span.attributes["error.type"] == "ValueError"
    assert turn.status.status_code == StatusCode.UNSET  # policy "continue": the turn went on
    assert NAME.upper() not in recorded(spans)


def test_a_tool_approval_pause_and_its_decision(spans):
    data = json.loads(json.dumps(FLOW))
    data["tools"]["lookup_member"]["approval"] = "always"
    ask = tool_calls(("lookup_member", {"name": NAME}))
    conversation = started(llm_fsm.load(data), ask, NAMED, hooks=member_hooks())
    spans.clear()
    conversation.send(USER_TEXT)
    conversation.resume(conversation.pending.token, {"approved": True})
    paused, resumed = turns(spans)
    assert paused.attributes["llm_fsm.pause.kind"] == "tool_approval"
    assert paused.attributes["llm_fsm.pause.tool"] == "lookup_member"
    assert resumed.attributes["llm_fsm.resume.decision"] == "approved"
    assert tree(spans, resumed) == ["invoke_agent signup", ["execute_tool lookup_member", "db query"], "chat"]


# -- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["sync", "async", "stream"])
def test_a_provider_error_is_an_error_on_the_model_call_and_the_turn(spans, form):
    conversation = started(flow(), LLMUnavailableError("the provider answered 503", status_code=503))
    spans.clear()
    with pytest.raises(LLMUnavailableError):
        if form == "sync":
            conversation.send(USER_TEXT)
        elif form == "async":
            asyncio.run(conversation.asend(USER_TEXT))
        else:
            list(conversation.stream(USER_TEXT))
    (turn,) = turns(spans)
    (chat,) = children(spans, turn)
    for span in (chat, turn):
        assert span.status.status_code == StatusCode.ERROR
        assert span.attributes["error.type"] == "LLMUnavailableError"
        (event,) = span.events
        assert event.name == "exception" and event.attributes["exception.message"] == "the provider answered 503"
        assert "scripted.py" in event.attributes["exception.stacktrace"]  # where it was raised
    assert "llm_fsm.state.after" not in turn.attributes


def test_litellm_calls_name_the_provider_model_and_server_but_never_the_key(spans, fake_openai):
    fake_openai.add(HTTPError(503, {"error": {"message": "overloaded"}}), json.dumps(OPENING))
    key = "sk-live-abcdefghijklmnop"
    llm = llm_fsm.LiteLLMClient(
        "openai/test-model", api_base=fake_openai.url, api_key=key, response_format="none", backoff=0.01,
        temperature=0.3, max_tokens=200,
    )  # fmt: skip
    llm_fsm.Conversation(flow(), llm, hooks=with_tool()).start()
    (turn,) = turns(spans)
    (chat,) = children(spans, turn)
    assert chat.name == "chat test-model"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.model"] == "test-model"
    assert chat.attributes["server.address"] == "127.0.0.1" and chat.attributes["server.port"] > 0
    assert chat.attributes["gen_ai.request.temperature"] == 0.3 and chat.attributes["gen_ai.request.max_tokens"] == 200
    assert chat.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert (chat.attributes["gen_ai.usage.input_tokens"], chat.attributes["gen_ai.usage.output_tokens"]) == (50, 10)
    (retry,) = chat.events
    assert retry.name == "llm_fsm.retry" and retry.attributes["error.type"] == "LLMUnavailableError"
    assert key not in recorded(spans)


def test_an_api_base_with_a_password_shows_only_its_host():
    llm = llm_fsm.LiteLLMClient("anthropic/claude-x", api_base="https://admin:pa55word@llm.example.com:8443/v1")
    attributes = telemetry.describe(llm)
    assert attributes["gen_ai.provider.name"] == "anthropic" and attributes["gen_ai.request.model"] == "claude-x"
    assert (attributes["server.address"], attributes["server.port"]) == ("llm.example.com", 8443)
    assert "pa55word" not in str(attributes) and "admin" not in str(attributes)
    assert telemetry.describe(llm_fsm.LiteLLMClient("bedrock/x"))["gen_ai.provider.name"] == "aws.bedrock"


# -- the conversation id ---------------------------------------------------------------------------


def test_a_stored_conversation_is_traced_under_its_store_id(spans):
    store = open_store("memory:")
    llm = ScriptedLLM([OPENING, NAMED])
    advance(store, "customer-42", flow(), llm, None, hooks=with_tool())
    advance(store, "customer-42", flow(), llm, USER_TEXT, hooks=with_tool())
    assert [t.attributes["gen_ai.conversation.id"] for t in turns(spans)] == ["customer-42", "customer-42"]


def test_a_served_conversation_is_traced_under_the_id_its_client_sees(spans):
    from fastapi.testclient import TestClient

    from llm_fsm.server import create_app

    app = create_app(
        [flow()],
        ScriptedLLM([OPENING, NAMED]),
        store="memory:",
        hooks=with_tool(),
        tokens={"t-1-0123456789abcdef": "alice"},
    )
    with TestClient(app) as http:
        headers = {"Authorization": "Bearer t-1-0123456789abcdef"}
        created = http.post("/conversations", json={"definition": "signup"}, headers=headers).json()
        sent = http.post(f"/conversations/{created['id']}/messages", json={"message": USER_TEXT}, headers=headers)
        assert sent.status_code == 200, sent.text
    assert [t.attributes["gen_ai.conversation.id"] for t in turns(spans)] == [created["id"]] * 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_summary_call_is_a_model_call_span_of_its_turn(spans, mode):
    talk = llm_fsm.load(
        {
            "name": "talk",
            "initial_state": "chat",
            "summaries": {"batch": 1},
            "states": {
                "chat": {"purpose": "Chat", "transitions": [{"target_state": "bye"}]},
                "bye": {"purpose": "Bye"},
            },
        }
    )
    replies = [reply("chat", f"r{i}") for i in range(4)]
    llm = ScriptedLLM(replies, summaries=lambda request: {"summary": "they said hello"})
    window = llm_fsm.PromptBuilder(settings=llm_fsm.PromptSettings(history_window=1))
    conversation = llm_fsm.Conversation(talk, llm, prompt=window)

    async def play() -> list[Any]:
        return [await conversation.astart(), *[await conversation.asend(f"u{i}") for i in range(3)]]

    results = (
        asyncio.run(play())
        if mode == "async"
        else [conversation.start()] + [conversation.send(f"u{i}") for i in range(3)]
    )
    summarised = [i for i, r in enumerate(results) if r.summary is not None]
    assert summarised, "the window of 1 overflows: some turn writes a summary"
    turn = turns(spans)[summarised[0]]
    calls = [s for s in spans.get_finished_spans() if s.parent and s.parent.span_id == turn.context.span_id]
    purposes = [c.attributes["llm_fsm.call.purpose"] for c in calls if c.name.split()[0] == "chat"]
    assert purposes == ["reply", "summary"]
    assert "they said hello" not in recorded(spans)


# -- content ---------------------------------------------------------------------------------------


def test_content_is_recorded_when_asked_but_secrets_never(spans, monkeypatch):
    monkeypatch.setenv(telemetry.CONTENT_VARIABLE, "1")
    ask = tool_calls(("lookup_member", {"name": NAME}))
    done = reply("done", "All set, welcome aboard!", password=PASSWORD)
    conversation = started(flow(), ask, NAMED, done)
    conversation.send(USER_TEXT)
    conversation.send(f"My password is {PASSWORD}, keep it safe")
    text = recorded(spans)
    assert USER_TEXT in text and "All set, welcome aboard!" in text and "2019" in text  # text, results
    assert "keep it safe" in text and PASSWORD not in text and "[masked]" in text
    named, last = turns(spans)[1:]
    chat, tool, _ = children(spans, named)
    inputs = json.loads(chat.attributes["gen_ai.input.messages"])
    assert inputs[0]["role"] == "system" and inputs[-1]["parts"][0]["content"] == USER_TEXT
    outputs = json.loads(chat.attributes["gen_ai.output.messages"])
    assert outputs[0]["parts"][0]["type"] == "tool_call" and outputs[0]["finish_reason"] == "tool_calls"
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"name": NAME}
    assert json.loads(tool.attributes["gen_ai.tool.call.result"]) == {"found": True, "since": 2019}
    assert json.loads(last.attributes["llm_fsm.context_updates"]) == {"password": "[masked]"}
    assert json.loads(last.attributes["llm_fsm.context"])["name"] == NAME
    (said,) = json.loads(last.attributes["gen_ai.input.messages"])
    assert said["role"] == "user" and said["parts"][0]["content"] == "My password is [masked], keep it safe"
    (chat,) = children(spans, last)
    told = json.loads(chat.attributes["gen_ai.input.messages"])[-1]["parts"][0]["content"]
    assert told == "My password is [masked], keep it safe"
    (output,) = json.loads(chat.attributes["gen_ai.output.messages"])
    assert json.loads(output["parts"][0]["content"])["transition"]["context_update"] == {"password": "[masked]"}


def test_rejection_reasons_and_check_reasons_are_content(spans, monkeypatch):
    monkeypatch.setenv(telemetry.CONTENT_VARIABLE, "yes")
    hooks = Hooks()
    hooks.check("polite")(lambda *, message: "say please" if "please" not in message else True)
    definition = flow(ask_name={"checks": [{"kind": "python", "name": "polite"}]})
    rude, polite = reply("ask_password", "Password.", name=NAME), reply("ask_password", "Password, please?", name=NAME)
    fresh(definition, rude, polite, hooks=hooks).send(USER_TEXT)
    (turn,) = turns(spans)
    assert turn.events[0].attributes["reason"] == "check 'python check #1' failed: say please"
    assert children(spans, turn)[1].attributes["llm_fsm.check.reason"] == "say please"


def test_a_content_variable_that_is_not_understood_is_said_once_and_means_off(spans, monkeypatch):
    monkeypatch.setenv(telemetry.CONTENT_VARIABLE, "please")
    with pytest.warns(UserWarning) as said:
        conversation = started(flow(), NAMED)
        conversation.send(USER_TEXT)
    assert USER_TEXT not in recorded(spans)
    (warning,) = said
    assert str(warning.message) == (
        "LLM_FSM_TRACE_CONTENT='please' is not understood: use 1 (record content) or 0; content is off"
    )


def test_a_provider_or_an_id_of_the_wrong_kind_is_refused_at_once():
    with pytest.raises(TypeError, match="takes an OpenTelemetry TracerProvider or None, not 'console'"):
        telemetry.set_tracer_provider("console")
    with pytest.raises(TypeError, match=r"a conversation's id is a str, not int \(42\)"):
        llm_fsm.Conversation(flow(), ScriptedLLM(), hooks=with_tool(), id=42)


def test_a_tracer_provider_that_fails_never_fails_the_turn(caplog):
    class Broken(TracerProvider):
        def get_tracer(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the collector is misconfigured")

    telemetry.set_tracer_provider(Broken())
    try:
        result = started(flow(), NAMED).send(USER_TEXT)
    finally:
        telemetry.set_tracer_provider(None)
    assert result.state == "ask_password"
    said = [r.getMessage() for r in caplog.records if r.name == "llm_fsm.telemetry"]
    assert said == ["tracing failed, the turn goes on without it: RuntimeError: the collector is misconfigured"]


# -- tracing off -----------------------------------------------------------------------------------


def test_without_a_provider_turns_run_untraced():
    seen = []
    hooks = Hooks()

    @hooks.on("state_enter")
    def look(**_: Any) -> None:
        seen.append(trace.get_current_span().is_recording())

    telemetry.set_tracer_provider(trace.NoOpTracerProvider())
    try:
        started(flow(), NAMED, hooks=hooks).send(USER_TEXT)
    finally:
        telemetry.set_tracer_provider(None)
    assert seen == [False]


def test_with_a_provider_handlers_run_inside_their_span(spans):
    seen = []
    hooks = Hooks()

    @hooks.on("state_enter")
    def look(**_: Any) -> None:
        seen.append(trace.get_current_span().is_recording())

    started(flow(), NAMED, hooks=hooks).send(USER_TEXT)
    assert seen == [True]


TURNS = """
import sys, importlib.abc, logging

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"No module named {name!r} (blocked)")
        return None

if sys.argv[2] == "missing":
    sys.meta_path.insert(0, Block())
import llm_fsm
from llm_fsm.testing import ScriptedLLM, reply
definition = llm_fsm.load(sys.argv[1])
first = definition.initial_state
opening = [] if definition.states[first].opening else [reply(first, "Hello!")]  # no call for its own opening
llm = ScriptedLLM([*opening, reply(first, "Again?")])
conversation = llm_fsm.Conversation(definition, llm)
conversation.start()
print(conversation.send("hi").message, [m for m in sys.modules if m.startswith("opentelemetry")])
"""


@pytest.mark.parametrize(("otel", "content"), [("missing", ""), ("missing", "1"), ("unused", ""), ("unused", "1")])
def test_without_opentelemetry_in_use_turns_never_import_it_and_content_asks_for_the_extra(otel, content):
    """Missing (an import hook refuses it) or installed but unused: turns work, and never import it;
    asking for content without it installed names the extra to install."""
    env = {**os.environ, telemetry.CONTENT_VARIABLE: content}
    example = str(ROOT / "fsm_definitions" / "small_talk.json")
    done = subprocess.run(
        [sys.executable, "-c", TURNS, example, otel], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Again? []"
    said = "pip install 'llm-fsm-runtime[otel]'" in done.stderr
    assert said == (otel == "missing" and content == "1")
