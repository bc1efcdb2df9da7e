from __future__ import annotations

import asyncio
import json

import pytest

import llm_fsm
from llm_fsm.llm import LLMResponse, Usage
from llm_fsm.streaming import MessageDelta, MessageReset
from llm_fsm.testing import ScriptedLLM
from tests.conftest import reply
from tests.llm.test_llm import client

REJECTED = reply("ask_email", "SECRET-REJECTED-TEXT: great, now your email")
CORRECTED = reply("ask_name", "First, what is your name?")


def split(events):
    deltas = [e.text for e in events if isinstance(e, MessageDelta)]
    return deltas, events[-1]


def test_deltas_add_up_to_the_message(signup):
    conv = llm_fsm.Conversation(
        signup, ScriptedLLM([reply("ask_name", "Hello there, what's your name?")], chunk_size=3)
    )
    deltas, result = split(list(conv.stream()))
    assert len(deltas) > 3 and "".join(deltas) == result.message == "Hello there, what's your name?"
    assert isinstance(result, llm_fsm.TurnResult) and conv.history[-1].assistant == result.message


def test_a_rejected_reply_is_never_shown_and_the_correction_streams(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM([REJECTED, CORRECTED]))
    events = list(conv.stream("hi"))
    deltas, result = split(events)
    assert "SECRET" not in "".join(deltas) and "".join(deltas) == CORRECTED["message"]
    assert not any(isinstance(e, MessageReset) for e in events)
    assert result.llm_calls == 2 and result.state == "ask_name"


def test_streaming_over_sse_never_yields_rejected_text(fake_openai, signup):
    fake_openai.add(json.dumps(REJECTED), json.dumps(CORRECTED))
    conv = llm_fsm.Conversation(signup, client(fake_openai, stream=True))
    deltas, result = split(list(conv.stream("hi")))
    assert all(r["stream"] is True for r in fake_openai.requests) and len(fake_openai.requests) == 2
    assert "SECRET" not in "".join(deltas) and "".join(deltas) == CORRECTED["message"]
    assert result.usage.total_tokens == 120, "usage of both streamed calls"


def test_closing_the_stream_early_leaves_the_conversation_as_before(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_email", "Thanks Ann! Your email?", name="Ann")]))
    before = conv.snapshot()
    stream = conv.stream("I'm Ann")
    assert isinstance(next(stream), MessageDelta)
    stream.close()
    assert conv.snapshot() == before
    assert conv.send is not None and not conv._busy  # the conversation accepts the next turn


def test_message_before_transition_streams_once_the_transition_checks_out(signup):
    # Issue 11 (c): the text events add up to the message whatever order the model writes the keys in.
    text = json.dumps({"message": "Hi! Name?", "transition": {"target_state": "ask_name", "context_update": {}}})
    events = list(llm_fsm.Conversation(signup, ScriptedLLM([text])).stream("hi"))
    deltas, result = split(events)
    assert "".join(deltas) == result.message == "Hi! Name?"


class ChangesItsMind:
    """Streams a valid reply, then delivers a different, invalid one as the final text."""

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request):
        raise NotImplementedError

    async def acomplete(self, request):
        raise NotImplementedError

    def stream_complete(self, request):
        self.calls += 1
        if self.calls == 1:
            yield json.dumps(reply("ask_name", "Shown then withdrawn"))
            yield LLMResponse("not json", Usage())
        else:
            yield LLMResponse(json.dumps(reply("ask_name", "Final answer")), Usage())

    async def astream_complete(self, request):
        for item in self.stream_complete(request):
            yield item


def test_text_shown_from_a_reply_that_then_fails_is_withdrawn(signup):
    events = list(llm_fsm.Conversation(signup, ChangesItsMind()).stream("hi"))
    kinds = [type(e).__name__ for e in events]
    # the final message arrives whole (the second call is not streamed), after the reset
    assert kinds == ["MessageDelta", "MessageReset", "MessageDelta", "TurnResult"]
    assert events[-1].message == events[-2].text == "Final answer"


def test_astream(signup):
    conv = llm_fsm.Conversation(signup, ScriptedLLM([REJECTED, CORRECTED]))

    async def collect():
        return [event async for event in conv.astream("hi")]

    deltas, result = split(asyncio.run(collect()))
    assert "".join(deltas) == CORRECTED["message"] and result.llm_calls == 2


def test_a_client_without_streaming_still_works(signup):
    class Plain:
        def __init__(self):
            self.inner = ScriptedLLM([reply("ask_name", "Hi")])

        def complete(self, request):
            return self.inner.complete(request)

        async def acomplete(self, request):
            return self.inner.complete(request)

    deltas, result = split(list(llm_fsm.Conversation(signup, Plain()).stream()))
    assert deltas == ["Hi"] and result.message == "Hi", "the whole message, in one delta"


def test_a_long_message_streams_in_full_with_a_bounded_number_of_parses(signup, monkeypatch):
    from llm_fsm import streaming

    calls = []
    real = streaming._partial_object
    monkeypatch.setattr(streaming, "_partial_object", lambda text: calls.append(len(text)) or real(text))
    message = "word " * 4000  # 20,000 characters in 2,500 deltas
    conv = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_name", message)], chunk_size=8))
    deltas, result = split(list(conv.stream("hi")))
    assert "".join(deltas) == message == result.message
    assert len(calls) < 600, f"{len(calls)} parses: growth-proportional, not one per delta"


# -- Issue 11: the preview is judged on the context the turn decides on ---------------------------

TO_DONE = reply("done", "REFUSED-TEXT: all set, you are signed up!")
STAY = reply("ask_email", "We still need a staff approval before we finish.")


def collect(conversation, text, mode):
    if mode == "sync":
        return list(conversation.stream(text))

    async def gather():
        return [event async for event in conversation.astream(text)]

    return asyncio.run(gather())


def after_last_reset(events):
    start = max((i + 1 for i, e in enumerate(events) if isinstance(e, MessageReset)), default=0)
    return "".join(e.text for e in events[start:] if isinstance(e, MessageDelta))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_reply_refused_because_a_handler_removed_a_key_is_never_shown(signup, mode):
    # The conversation's own snapshot holds the approval; a before_llm_call handler withdraws it,
    # so the turn refuses the move to 'done'. Its text must not stream (it did when the preview
    # looked at the conversation's snapshot instead of the turn's).
    hooks = llm_fsm.Hooks()
    hooks.on("before_llm_call")(lambda **_: {"approved": None})
    conv = llm_fsm.Conversation(
        signup, ScriptedLLM([TO_DONE, STAY], chunk_size=4), state="ask_email",
        context={"email": "a@b.c", "approved": True}, hooks=hooks,
    )  # fmt: skip
    events = collect(conv, "that's all", mode)
    deltas, result = split(events)
    assert "REFUSED" not in "".join(deltas) and not any(isinstance(e, MessageReset) for e in events)
    assert result.state == "ask_email" and result.llm_calls == 2 and "".join(deltas) == STAY["message"]
    assert [r.kind for r in result.rejected] == ["condition"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_valid_reply_streams_when_a_handler_added_the_key_it_needs(signup, mode):
    hooks = llm_fsm.Hooks()
    hooks.on("before_llm_call")(lambda **_: {"approved": True})
    done = reply("done", "All set, you are signed up! Thank you for your patience today.")
    conv = llm_fsm.Conversation(
        signup, ScriptedLLM([done], chunk_size=4), state="ask_email", context={"email": "a@b.c"}, hooks=hooks
    )
    events = collect(conv, "that's all", mode)
    deltas, result = split(events)
    assert result.state == "done" and result.llm_calls == 1
    assert len(deltas) > 3, "streamed as it arrived, not in one piece at the end"
    assert "".join(deltas) == done["message"] and not any(isinstance(e, MessageReset) for e in events)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_move_a_handler_pauses_before_the_commit_is_never_shown(signup, mode):
    hooks = llm_fsm.Hooks()

    @hooks.on("before_transition", targets=["ask_email"])
    def hold(**_):
        raise llm_fsm.Break("needs review", message="One moment, a person checks this.")

    conv = llm_fsm.Conversation(
        signup, ScriptedLLM([reply("ask_email", "MOVED: your email?", name="Ann")]), hooks=hooks
    )
    events = collect(conv, "I'm Ann", mode)
    deltas, result = split(events)
    assert result.paused and result.state == "ask_name"
    assert "MOVED" not in "".join(deltas) and "".join(deltas) == "One moment, a person checks this."


def scenario_replies():
    message_first = json.dumps(
        {"message": "Hi! Name?", "transition": {"target_state": "ask_name", "context_update": {}}}
    )
    return {
        "valid": [reply("ask_email", "Thanks Ann! Your email?", name="Ann")],
        "refused_then_valid": [reply("done", "REFUSED: bye"), reply("ask_name", "Your name, please?")],
        "message_first": [message_first],
        "fallback_after_invalid": ["not json", "still not json"],
        "shown_then_unparseable": None,  # ChangesItsMind below
    }


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("scenario", sorted(scenario_replies()))
def test_the_text_events_always_add_up_to_the_final_message(signup, scenario, mode):
    replies = scenario_replies()[scenario]
    llm = ChangesItsMind() if replies is None else ScriptedLLM(replies, chunk_size=3)
    if replies is None:
        llm.acomplete = None  # the driver must not need it: every call of this turn streams or completes sync
    events = collect(llm_fsm.Conversation(signup, llm), "hi", mode)
    result = events[-1]
    assert isinstance(result, llm_fsm.TurnResult) and result.message
    assert after_last_reset(events) == result.message
    assert all(not isinstance(e, llm_fsm.TurnResult) for e in events[:-1])


def test_a_state_with_checks_shows_its_message_once_whole(signup):
    data = json.loads(json.dumps(signup.model_dump(mode="json", by_alias=True, exclude_none=True)))
    data["states"]["ask_name"]["checks"] = [{"kind": "max_length", "max": 100}]
    definition = llm_fsm.load(data)
    conv = llm_fsm.Conversation(definition, ScriptedLLM([reply("ask_name", "Hello, your name?")], chunk_size=2))
    deltas, result = split(list(conv.stream("hi")))
    assert deltas == ["Hello, your name?"] == [result.message], "nothing before the checks passed, then all of it"


def test_the_stream_driver_holds_no_turn_rules():
    # The drivers only move items and events: the rules live in the turn runner and the engine.
    import ast
    import inspect

    from llm_fsm import conversation

    imported = {
        (node.module, alias.name)
        for node in ast.walk(ast.parse(inspect.getsource(conversation)))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert not {m for m, _ in imported} & {"llm_fsm.contract", "llm_fsm.turn.checks", "llm_fsm.logic.rules"}
    assert not {n for _, n in imported} & {"decide", "commit", "merge", "Reply"}


@pytest.mark.parametrize("mode", ["sync", "async", "send", "asend"])
def test_a_turn_paused_before_its_model_call_ends_with_its_message(signup, mode):
    hooks = llm_fsm.Hooks()

    @hooks.on("before_llm_call")
    def hold(**_):
        raise llm_fsm.Break("closed for the night", message="We are closed; we will write back.")

    llm = ScriptedLLM([])
    conv = llm_fsm.Conversation(signup, llm, hooks=hooks)
    if mode in ("send", "asend"):
        result = conv.send("hi") if mode == "send" else asyncio.run(conv.asend("hi"))
    else:
        events = collect(conv, "hi", mode)
        result = events[-1]
        assert after_last_reset(events) == "We are closed; we will write back."
    assert result.paused and result.message == "We are closed; we will write back." and llm.calls == 0


# -- found by a new user's audit -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["sync", "async", "send"])
def test_a_break_in_an_after_reply_handler_pauses_in_the_old_state(signup, mode):
    hooks = llm_fsm.Hooks()

    @hooks.on("after_reply")
    def review(**_):
        raise llm_fsm.Break("a person reviews drafts", message="One moment, please.")

    conv = llm_fsm.Conversation(signup, ScriptedLLM([reply("ask_email", "MOVED", name="Ann")]), hooks=hooks)
    result = conv.send("I'm Ann") if mode == "send" else collect(conv, "I'm Ann", mode)[-1]
    assert result.paused and conv.state == "ask_name" and result.message == "One moment, please."
    assert "name" not in conv.context, "the move and its writes wait for the resume"


def test_stopping_before_the_result_changes_nothing_even_when_the_turn_had_decided(signup):
    data = json.loads(json.dumps(signup.model_dump(mode="json", by_alias=True, exclude_none=True)))
    data["states"]["ask_name"]["checks"] = [{"kind": "max_length", "max": 100}]
    conv = llm_fsm.Conversation(llm_fsm.load(data), ScriptedLLM([reply("ask_email", "Hi Ann! Email?", name="Ann")]))
    before = conv.snapshot()
    events = conv.stream("I'm Ann")
    assert isinstance(next(events), MessageDelta), "the whole message, once the turn decided"
    events.close()
    assert conv.snapshot() == before and not conv._busy


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_text_shown_before_a_handler_fails_after_the_commit_is_withdrawn(signup, mode):
    hooks = llm_fsm.Hooks()

    @hooks.on("state_enter", states=["ask_email"])
    def crm(**_):
        raise RuntimeError("the CRM is down")

    conv = llm_fsm.Conversation(
        signup, ScriptedLLM([reply("ask_email", "Thanks Ann! Your email?", name="Ann")]), hooks=hooks
    )
    before, events = conv.snapshot(), []

    async def agather():
        async for event in conv.astream("I'm Ann"):
            events.append(event)

    with pytest.raises(llm_fsm.HandlerError):
        for event in conv.stream("I'm Ann") if mode == "sync" else ():
            events.append(event)
        if mode == "async":
            asyncio.run(agather())
    assert conv.snapshot() == before
    assert any(isinstance(e, MessageDelta) for e in events) and isinstance(events[-1], MessageReset)


@pytest.mark.parametrize(
    "text",
    [
        '{"transition": {"target_state": "ask_email", "context_update": {}, "message": "SHOWN"}, "message": "SHOWN"}',
        '{"transition": {"target_state": "ask_email", "context_update": {"name": NaN}}, "message": "SHOWN"}',
        '{"target_state": "ask_email", "transition": {"target_state": "ask_email"}, "message": "SHOWN"}',
    ],
    ids=["message-inside-transition", "nan", "misplaced-target"],
)
def test_a_reply_the_parser_will_refuse_for_its_shape_never_streams(signup, text):
    conv = llm_fsm.Conversation(signup, ScriptedLLM([text, reply("ask_name", "Your name?")], chunk_size=4))
    events = list(conv.stream("I'm Ann"))
    assert "SHOWN" not in "".join(e.text for e in events if isinstance(e, MessageDelta))
    assert not any(isinstance(e, MessageReset) for e in events) and events[-1].message == "Your name?"
