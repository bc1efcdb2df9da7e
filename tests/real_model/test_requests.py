"""What goes over the wire to llama-server and what comes back: the strict schema, the token limit, refusals."""

from __future__ import annotations

import json

import jsonschema
import pytest

import llm_fsm
from llm_fsm.turn.requests import state_reply_schemas
from llm_fsm.turn.runner import DEFAULT_FALLBACK
from tests.conftest import ROOT
from tests.real_model.conftest import check_turn, model_opens, unchanged

pytestmark = pytest.mark.real_model

FORM = ROOT / "fsm_definitions" / "form_filling.json"
SMALL_TALK = ROOT / "fsm_definitions" / "small_talk.json"


def test_the_strict_json_schema_is_sent_accepted_and_obeyed(make_client, recorded):
    definition = model_opens(FORM)
    conversation = llm_fsm.Conversation(definition, make_client(api_base=recorded.base_url))
    states = [conversation.state]
    conversation.start()
    states.append(conversation.state)
    conversation.send("My name is Ann Lee.")
    recorded.wait(len(recorded.requests))
    assert recorded.statuses and set(recorded.statuses) == {200}
    replies = recorded.replies()
    assert len(replies) == len(recorded.requests) >= 2
    checked = 0
    for sent, answer in zip(recorded.requests, replies, strict=True):
        response_format = sent["response_format"]
        assert response_format["type"] == "json_schema"
        assert response_format["json_schema"]["strict"] is True
        schema = response_format["json_schema"]["schema"]
        assert schema in [state_reply_schemas(definition, state)[1] for state in states]
        # llama-server turns the schema into a grammar: what it sends back always matches it, unless the
        # token limit cut it off (then the runtime asked again with a larger budget: the next request)
        if answer["choices"][0].get("finish_reason") == "length":
            continue
        jsonschema.validate(json.loads(answer["choices"][0]["message"]["content"]), schema)
        checked += 1
    assert checked, "every answer was cut off at the token limit"


def test_auto_asks_a_model_litellm_does_not_know_for_json_mode(make_client, recorded):
    definition = model_opens(SMALL_TALK)
    # in JSON mode SmolLM2 tends to write until the limit: a short one, as only the request matters here
    llm = make_client(api_base=recorded.base_url, response_format="auto", max_tokens=48)
    conversation = llm_fsm.Conversation(definition, llm)
    before = conversation.snapshot()
    result = conversation.start()
    check_turn(definition, conversation, before, result)
    assert recorded.requests[0]["response_format"] == {"type": "json_object"}
    assert recorded.statuses[0] == 200


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_a_reply_cut_by_max_tokens_is_rejected_and_not_committed(make_client, recorded, stream):
    definition = model_opens(FORM)
    conversation = llm_fsm.Conversation(definition, make_client())
    conversation.start()
    before = conversation.snapshot()
    conversation.llm = make_client(api_base=recorded.base_url, max_tokens=12, stream=stream)
    result = conversation.send("My name is Ann Lee.")
    assert [r.kind for r in result.rejected] == ["truncated", "truncated"]  # the reply, then the correction's
    assert result.llm_calls == 2
    assert [sent["max_tokens"] for sent in recorded.requests] == [12, 24]  # the correction asks for more room
    assert (result.state, result.message, result.context_updates) == (before.state, DEFAULT_FALLBACK, {})
    assert conversation.context == before.context  # nothing of the cut replies was committed
    check_turn(definition, conversation, before, result)
    if not stream:
        recorded.wait(2)
        assert [r["choices"][0]["finish_reason"] for r in recorded.replies()] == ["length", "length"]


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
def test_a_message_longer_than_the_context_is_refused_and_changes_nothing(make_client, stream):
    definition = model_opens(SMALL_TALK)
    conversation = llm_fsm.Conversation(definition, make_client(stream=stream))
    before = conversation.snapshot()
    with pytest.raises(llm_fsm.LLMContextWindowError) as caught:
        conversation.send("tell me about the weather " * 3000)  # about 15,000 tokens; the context holds 8,192
    error = caught.value
    assert error.status_code == 400 and "exceeds the available context size" in str(error)
    assert type(error.cause).__name__ == "ContextWindowExceededError"  # litellm read llama.cpp's message
    assert unchanged(conversation, before)


def test_a_server_with_a_small_context_refuses_every_prompt(small_context_model):
    definition = model_opens(SMALL_TALK)
    llm = llm_fsm.LiteLLMClient(
        "openai/smollm2", api_base=small_context_model.base_url, api_key="none", max_retries=0, quiet=True
    )
    conversation = llm_fsm.Conversation(definition, llm)
    before = conversation.snapshot()
    with pytest.raises(llm_fsm.LLMContextWindowError, match="exceeds the available context size"):
        conversation.start()
    assert unchanged(conversation, before)
