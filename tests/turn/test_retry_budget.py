"""Issue 28 ("Also" 4): the retry after a reply cut at the token limit asks for no more tokens than the reply
schema the model is held to can need; without a bounded schema, for twice the budget, never more."""

from __future__ import annotations

import json

import pytest

import llm_fsm
from llm_fsm.guided.schema import MAX_MESSAGE, MAX_TEXT
from llm_fsm.llm import LLMRequest
from llm_fsm.llm.protocol import longer_budget, max_reply_chars
from tests.conftest import reply
from tests.fake_openai import Cut
from tests.llm.test_llm import client

GOOD = {"transition": {"target_state": "ask_email", "context_update": {"name": "Ann"}}, "message": "Your email?"}
CUT = json.dumps(reply("ask_email", "Thanks Ann! What's your e"))


@pytest.mark.parametrize("budget", [300, 500])
def test_a_guided_retry_asks_for_what_the_schema_can_need_not_twice_the_budget(fake_openai, signup, budget):
    fake_openai.add(Cut(CUT), json.dumps(GOOD))
    llm = client(fake_openai, response_format="json_schema", guided=True, max_tokens=budget)
    result = llm_fsm.Conversation(signup, llm).send("I'm Ann")
    assert result.message == GOOD["message"] and [r.kind for r in result.rejected] == ["truncated"]
    first, retry = fake_openai.requests
    schema = retry["response_format"]["json_schema"]["schema"]
    need = max_reply_chars(schema)
    assert need is not None and MAX_MESSAGE + MAX_TEXT < need < 2 * 300  # the message and the name, bounded
    # 300: what it needs, from the first call on (a guided reply ends with its grammar); 500: the budget again
    assert first["max_tokens"] == retry["max_tokens"] == max(budget, need) < 2 * budget


def test_without_a_bounded_schema_the_retry_doubles_the_clients_budget_once(fake_openai, signup):
    # the plain strict schema leaves the message and reasoning free: nothing bounds the reply but the budget
    fake_openai.add(Cut(CUT), Cut(CUT), json.dumps(GOOD))
    llm = client(fake_openai, response_format="json_schema", max_tokens=100)
    result = llm_fsm.Conversation(signup, llm, max_corrections=2).send("I'm Ann")
    assert [r.kind for r in result.rejected] == ["truncated", "truncated"] and result.message == GOOD["message"]
    assert [r["max_tokens"] for r in fake_openai.requests] == [100, 200, 200], "doubled from the budget, never 4x"


def test_the_schema_bound_counts_every_bounded_shape_and_refuses_the_rest():
    text = {"type": "string", "maxLength": 10}
    closed = {"type": "object", "properties": {"a": text, "b": {"enum": ["xy", 3]}}, "additionalProperties": False}
    assert max_reply_chars(closed) == len(json.dumps({"a": "x" * 10, "b": "xy"}))
    assert max_reply_chars({"anyOf": [text, {"type": "null"}]}) == 12
    assert max_reply_chars({"type": "array", "maxItems": 2, "items": {"type": "boolean"}}) == len(
        json.dumps([False, False])
    )
    assert max_reply_chars({"type": "integer", "minimum": -5, "maximum": 100}) == 3
    for unbounded in ({"type": "string"}, {"type": "object"}, {"type": "array", "items": text}, {}):
        assert max_reply_chars(unbounded) is None
    assert longer_budget(100, closed) == 100 and longer_budget(20, closed) == max_reply_chars(closed) == 30
    assert longer_budget(10, {"type": "string", "maxLength": 1000}) == 20 and longer_budget(10, None) == 20


def test_a_schema_the_provider_is_not_held_to_does_not_bound_the_retry():
    # JSON mode, or tools called natively: the reply may be longer than the schema says, so the budget doubles
    bounded = {"type": "object", "properties": {}, "additionalProperties": False}
    request = LLMRequest([{"role": "user", "content": "x"}], bounded, bounded, longer=True)
    assert (
        llm_fsm.LiteLLMClient("openai/x", response_format="json_object", max_tokens=50)._params(request, stream=False)[
            "max_tokens"
        ]
        == 100
    )
    held = llm_fsm.LiteLLMClient("openai/x", response_format="json_schema", max_tokens=50)
    assert held._params(request, stream=False)["max_tokens"] == 50
    tools = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)
    native = llm_fsm.LiteLLMClient("openai/x", response_format="json_schema", tool_calling="native", max_tokens=50)
    with_tools = LLMRequest(request.messages, bounded, bounded, longer=True, tools=tools)
    assert native._params(with_tools, stream=False)["max_tokens"] == 100


def test_a_guided_call_gets_what_its_schema_can_need_at_once_and_a_plain_one_its_budget():
    # a guided reply stops where its grammar ends: cut at the budget, it was only asked again with more
    bounded = {
        "type": "object",
        "properties": {"m": {"type": "string", "maxLength": 150}},
        "additionalProperties": False,
    }
    first = LLMRequest([{"role": "user", "content": "x"}], bounded, bounded)
    guided = llm_fsm.LiteLLMClient("openai/x", response_format="json_schema", max_tokens=50, guided=True)
    need = max_reply_chars(bounded)
    assert need is not None and need > 100 and guided._params(first, stream=False)["max_tokens"] == 100  # twice at most
    small = llm_fsm.LiteLLMClient("openai/x", response_format="json_schema", max_tokens=200, guided=True)
    assert small._params(first, stream=False)["max_tokens"] == 200  # never below the budget
    plain = llm_fsm.LiteLLMClient("openai/x", response_format="json_schema", max_tokens=50)
    assert plain._params(first, stream=False)["max_tokens"] == 50
    # a retry of a guided call gets the same, not four times the budget; a schema with no bound, the budget
    again = LLMRequest(first.messages, bounded, bounded, longer=True)
    assert guided._params(again, stream=False)["max_tokens"] == 100
    free = LLMRequest(first.messages, {"type": "object"}, {"type": "object"})
    assert guided._params(free, stream=False)["max_tokens"] == 50
