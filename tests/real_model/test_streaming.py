"""Streaming against llama-server's own SSE: deltas, usage, finish reasons, and cancelling a turn midway."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools

import pytest

import llm_fsm
from llm_fsm.conversation import TurnResult
from llm_fsm.llm import LLMRequest, LLMResponse
from llm_fsm.streaming import MessageDelta, MessageReset
from tests.conftest import ROOT
from tests.real_model.conftest import check_turn, generating, model_opens, unchanged, wait_for

pytestmark = pytest.mark.real_model

SMALL_TALK = ROOT / "fsm_definitions" / "small_talk.json"
COUNTING = LLMRequest(
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Count from one to twenty in words, separated by commas."},
    ]
)


def test_a_stream_arrives_in_pieces_with_usage_and_finish_reason(make_client, recorded):
    client = make_client(api_base=recorded.base_url, stream=True, response_format="none", max_tokens=200)
    items = list(client.stream_complete(COUNTING))
    *deltas, response = items
    assert isinstance(response, LLMResponse) and all(isinstance(d, str) for d in deltas)
    assert len(deltas) > 5  # token by token, not one block
    assert response.text == "".join(deltas) and response.text.strip()
    assert response.finish_reason == "stop"
    usage = response.usage
    assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens < 200
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    recorded.wait(1)
    sent = recorded.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    events = [line for line in recorded.bodies[0].splitlines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) > len(deltas)  # the server's own SSE events


def test_a_stream_cut_by_max_tokens_says_length(make_client):
    client = make_client(stream=True, response_format="none", max_tokens=5)
    *deltas, response = client.stream_complete(COUNTING)
    assert response.finish_reason == "length"
    assert response.usage.completion_tokens == 5
    assert response.text == "".join(deltas)


def test_a_streamed_turn_shows_its_message_as_it_arrives(make_client):
    definition = model_opens(SMALL_TALK)
    conversation = llm_fsm.Conversation(definition, make_client(stream=True))
    before = conversation.snapshot()
    events = list(conversation.stream())
    result = events[-1]
    assert isinstance(result, TurnResult)
    check_turn(definition, conversation, before, result)
    shown = ""
    for event in events[:-1]:
        shown = "" if isinstance(event, MessageReset) else shown + event.text
    assert shown == result.message
    deltas = [e.text for e in events if isinstance(e, MessageDelta)]
    if result.llm_calls == 1 and not result.rejected and len(result.message) > 12:  # the model's own message
        assert len(deltas) > 1, deltas  # it arrived in pieces, as the model wrote it, before the turn ended
    assert result.usage.completion_tokens > 0  # usage of a streamed call (include_usage)


def first_delta(events) -> MessageDelta:
    for event in events:
        assert not isinstance(event, TurnResult), "the turn ended before any text streamed"
        if isinstance(event, MessageDelta):
            return event
    raise AssertionError("no event")


def test_closing_a_stream_midway_leaves_the_conversation_unchanged(make_client):
    definition = model_opens(SMALL_TALK)
    conversation = llm_fsm.Conversation(definition, make_client(stream=True))
    conversation.start()
    before = conversation.snapshot()
    events = conversation.stream("Hello! I'm fine, a bit tired. How are you?")
    first_delta(events)
    events.close()  # the reader gave up: the HTTP stream is closed under the model
    assert unchanged(conversation, before)
    result = conversation.send("Hello! I'm fine, a bit tired. How are you?")  # the server took the next one
    check_turn(definition, conversation, before, result)


def test_cancelling_an_async_turn_while_the_model_writes_changes_nothing_and_stops_the_server(make_client, local_model):
    definition = model_opens(SMALL_TALK)
    conversation = llm_fsm.Conversation(definition, make_client(stream=True))
    text = "Hi there, how is your day going?"

    async def cancel_midway() -> None:
        await conversation.astart()
        before = conversation.snapshot()

        async def read() -> None:
            async with contextlib.aclosing(conversation.astream(text)) as events:
                async for _event in events:
                    pass

        cancelled = cancellations(local_model)
        task = asyncio.create_task(read())
        assert await asyncio.to_thread(wait_for, lambda: generating(local_model.port), 60)
        task.cancel()  # the model is still writing: the task stops where it is
        with pytest.raises(asyncio.CancelledError):
            await task
        assert unchanged(conversation, before)
        # the HTTP stream was closed, and llama-server stopped working on the abandoned reply
        assert await asyncio.to_thread(wait_for, lambda: not generating(local_model.port), 3)
        assert wait_for(lambda: cancellations(local_model) > cancelled, 3)  # the log is written by a thread
        result = await conversation.asend(text)
        check_turn(definition, conversation, before, result)

    asyncio.run(cancel_midway())


def cancellations(server) -> int:
    """How many requests llama-server abandoned because their client went away (it logs each)."""
    return server.log.read_text(errors="replace").count("cancel task")


STORY = LLMRequest([{"role": "user", "content": "Write a very long story about a dragon and a knight."}])


def test_closing_a_sync_stream_early_stops_the_server(make_client, local_model):
    client = make_client(stream=True, response_format="none", max_tokens=400)  # over 3 s, even on an idle machine
    gc.disable()  # the point is that closing closes the connection, not that a collection happens to run
    try:
        stream = client.stream_complete(STORY)
        for _delta in itertools.islice(stream, 3):
            pass
        cancelled = cancellations(local_model)
        stream.close()
        assert wait_for(lambda: not generating(local_model.port), 1)
        assert wait_for(lambda: cancellations(local_model) > cancelled, 3)  # the log is written by a thread
    finally:
        gc.enable()
        wait_for(lambda: not generating(local_model.port), 120)  # the next test gets an idle server


def test_cancelling_an_async_stream_early_stops_the_server(make_client, local_model):
    client = make_client(stream=True, response_format="none", max_tokens=400)

    async def cancel() -> None:
        async def read() -> None:
            async for _item in client.astream_complete(STORY):
                pass

        cancelled = cancellations(local_model)
        task = asyncio.create_task(read())
        assert await asyncio.to_thread(wait_for, lambda: generating(local_model.port), 60)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await asyncio.to_thread(wait_for, lambda: not generating(local_model.port), 1)
        assert wait_for(lambda: cancellations(local_model) > cancelled, 3)  # the log is written by a thread

    asyncio.run(cancel())
